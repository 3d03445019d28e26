package workload

import (
	"bufio"
	"bytes"
	"os"
	"os/user"
	"strings"
	"sync"
	"time"
)

// nssTTL bounds how long an os/user answer is trusted; directory services
// (LDAP, SSSD) can be slow, so they are asked rarely.
const nssTTL = 10 * time.Minute

// passwd maps uids to user names from a passwd file, re-read when its
// size, mtime or inode change, and optionally from os/user for uids the
// file lacks (HPC users usually live in LDAP; os/user reaches NSS only in
// cgo builds, and otherwise reads the local /etc/passwd again).
type passwd struct {
	path string
	nss  bool
	now  func() time.Time

	mu    sync.Mutex
	stamp fileStamp
	names map[string]string
	nsc   map[string]nssAnswer
}

type nssAnswer struct {
	name string
	ok   bool
	at   time.Time
}

func newPasswd(path string, nss bool, now func() time.Time) *passwd {
	return &passwd{path: path, nss: nss, now: now, nsc: map[string]nssAnswer{}}
}

func (p *passwd) lookup(uid string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := stampOf(p.path); !ok || st != p.stamp {
		p.stamp, p.names = st, nil
		if data, err := os.ReadFile(p.path); err == nil {
			p.names = parsePasswd(data)
		}
	}
	if n, ok := p.names[uid]; ok {
		return n, true
	}
	if !p.nss {
		return "", false
	}
	if a, ok := p.nsc[uid]; ok && p.now().Sub(a.at) < nssTTL {
		return a.name, a.ok
	}
	a := nssAnswer{at: p.now()}
	if u, err := user.LookupId(uid); err == nil {
		a.name, a.ok = u.Username, true
	}
	p.nsc[uid] = a
	return a.name, a.ok
}

// parsePasswd reads name:passwd:uid:… lines; the first name of a uid wins,
// as getpwuid does.
func parsePasswd(data []byte) map[string]string {
	names := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, ":", 4)
		if len(f) < 4 || f[0] == "" || f[2] == "" {
			continue
		}
		if _, dup := names[f[2]]; !dup {
			names[f[2]] = f[0]
		}
	}
	return names
}
