package procpid

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseEnviron(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
	}{
		{"", map[string]string{}},
		{"A=1\x00B=2\x00", map[string]string{"A": "1", "B": "2"}},
		{"A=1\x00B=2", map[string]string{"A": "1", "B": "2"}}, // no trailing NUL
		{"A=x=y\x00", map[string]string{"A": "x=y"}},          // value may hold '='
		{"A=\x00", map[string]string{"A": ""}},
		{"A=1\x00A=2\x00", map[string]string{"A": "1"}},              // first wins, like getenv
		{"junk\x00=val\x00\x00B=2\x00", map[string]string{"B": "2"}}, // no '=', empty key, empty entry
	} {
		got := ParseEnviron([]byte(tc.in))
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ParseEnviron(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// ReadEnviron reads the file under the given root; a missing pid is
// Vanished, an unreadable one keeps its permission error, and Vanished
// tells ESRCH from other errors.
func TestReadEnvironAndVanished(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "7", "environ"), []byte("A=1\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadEnviron(root, 7); err != nil || string(b) != "A=1\x00" {
		t.Errorf("ReadEnviron(7) = %q, %v", b, err)
	}
	_, err := ReadEnviron(root, 8)
	if err == nil || !Vanished(err) {
		t.Errorf("ReadEnviron of a missing pid: %v, want a Vanished error", err)
	}
	if !Vanished(fmt.Errorf("wrapped: %w", unix.ESRCH)) || Vanished(unix.EACCES) || Vanished(fs.ErrPermission) {
		t.Error("Vanished misclassifies ESRCH, EACCES or ErrPermission")
	}
	if !errors.Is(fmt.Errorf("x: %w", unix.EACCES), fs.ErrPermission) {
		t.Error("EACCES is not fs.ErrPermission")
	}
}

// FuzzParseEnviron checks the parser's invariants on arbitrary bytes:
// keys are non-empty without '=' or NUL, values have no NUL, LookupEnviron
// agrees with the map, and a map written back out parses to itself.
func FuzzParseEnviron(f *testing.F) {
	for _, s := range []string{
		"", "A=1\x00B=2\x00", "A=1\x00A=2", "=x\x00y\x00", "\x00\x00", "K==\x00",
		"WATTRACE_PROFILE=1\x00", "WATTRACE_PROFILE=\x00WATTRACE_PROFILE=1", "\xff=\xfe\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		env := ParseEnviron(b)
		var out bytes.Buffer
		for k, v := range env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				t.Fatalf("bad key %q", k)
			}
			if strings.ContainsRune(v, 0) {
				t.Fatalf("value of %q holds NUL: %q", k, v)
			}
			if got, ok := LookupEnviron(b, k); !ok || got != v {
				t.Fatalf("LookupEnviron(%q) = %q, %v; map has %q", k, got, ok, v)
			}
			out.WriteString(k + "=" + v + "\x00")
		}
		if back := ParseEnviron(out.Bytes()); fmt.Sprint(back) != fmt.Sprint(env) {
			t.Fatalf("round trip: %v != %v", back, env)
		}
	})
}
