package unitstest

import (
	"os"
	"path/filepath"
	"testing"
)

// FakeMunge writes stand-ins for the munge and unmunge commands, for tests
// on machines without munged: the "credential" is base64 of what unmunge
// would print (status 0, the encode time, -t's TTL, the uid from
// FAKE_MUNGE_UID or the caller's, the payload), and unmunge prints it
// back. Unlike munged's, nothing vouches for the uid: tests of who may
// forge what run the real commands (internal/units/access, e2e).
func FakeMunge(t testing.TB) (munge, unmunge string) {
	t.Helper()
	dir := t.TempDir()
	munge, unmunge = filepath.Join(dir, "munge"), filepath.Join(dir, "unmunge")
	for p, body := range map[string]string{
		munge: `#!/bin/sh
ttl=300
while [ $# -gt 0 ]; do case $1 in -t) ttl=$2; shift;; esac; shift; done
p=$(cat)
m=$(printf 'STATUS:          0\nENCODE_TIME:     %s\nTTL:             %s\nUID:             %s\n\n%s' "$(date +%s)" "$ttl" "${FAKE_MUNGE_UID:-$(id -u)}" "$p")
printf 'MUNGE:%s:\n' "$(printf '%s' "$m" | base64 -w0)"
`,
		unmunge: `#!/bin/sh
c=$(cat); c=${c#MUNGE:}; c=${c%:}
printf '%s' "$c" | base64 -d
`,
	} {
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return munge, unmunge
}
