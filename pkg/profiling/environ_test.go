package profiling

import (
	"bytes"
	"fmt"
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

func TestFilter(t *testing.T) {
	f, err := NewFilter([]string{"WATTRACE_PROFILE", "CEEMS_PROFILE", "WATTRACE_PROFILE"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Vars(); len(got) != 2 {
		t.Errorf("Vars() = %v, want the two distinct names", got)
	}
	for _, tc := range []struct {
		env   string
		match string
	}{
		{"PATH=/bin\x00WATTRACE_PROFILE=1\x00", "WATTRACE_PROFILE"},
		{"CEEMS_PROFILE=yes", "CEEMS_PROFILE"},
		{"WATTRACE_PROFILE=0\x00", "WATTRACE_PROFILE"}, // any non-empty value
		{"WATTRACE_PROFILE=\x00", ""},                  // empty opts out
		{"WATTRACE_PROFILE=\x00WATTRACE_PROFILE=1\x00", ""},
		{"XWATTRACE_PROFILE=1\x00WATTRACE_PROFILEX=1\x00", ""},
		{"WATTRACE_PROFILE\x00", ""},
		{"", ""},
	} {
		v, ok := f.Match([]byte(tc.env))
		if v != tc.match || ok != (tc.match != "") {
			t.Errorf("Match(%q) = %q, %v; want %q", tc.env, v, ok, tc.match)
		}
	}
	for _, bad := range [][]string{nil, {""}, {"A=B"}, {"A\x00"}} {
		if _, err := NewFilter(bad); err == nil {
			t.Errorf("NewFilter(%q): no error", bad)
		}
	}
}

func TestMatchPID(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "7", "environ"), []byte("WATTRACE_PROFILE=1\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := NewFilter([]string{DefaultEnvVar})
	if ok, err := f.MatchPID(root, 7); !ok || err != nil {
		t.Errorf("MatchPID(7) = %v, %v", ok, err)
	}
	_, err := f.MatchPID(root, 8)
	if err == nil || !Gone(err) {
		t.Errorf("MatchPID of a missing pid: %v, want a Gone error", err)
	}
	if !Gone(fmt.Errorf("wrapped: %w", unix.ESRCH)) || Gone(unix.EACCES) {
		t.Error("Gone misclassifies ESRCH or EACCES")
	}
}

// FuzzParseEnviron checks the parser's invariants on arbitrary bytes:
// keys are non-empty without '=' or NUL, values have no NUL, LookupEnviron
// and Filter.Match agree with the map, and a map written back out parses
// to itself.
func FuzzParseEnviron(f *testing.F) {
	for _, s := range []string{
		"", "A=1\x00B=2\x00", "A=1\x00A=2", "=x\x00y\x00", "\x00\x00", "K==\x00",
		"WATTRACE_PROFILE=1\x00", "WATTRACE_PROFILE=\x00WATTRACE_PROFILE=1", "\xff=\xfe\x00",
	} {
		f.Add([]byte(s))
	}
	filter, err := NewFilter([]string{DefaultEnvVar})
	if err != nil {
		f.Fatal(err)
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
		v, inMap := env[DefaultEnvVar]
		if _, ok := filter.Match(b); ok != (inMap && v != "") {
			t.Fatalf("Match = %v, map value %q (present %v)", ok, v, inMap)
		}
		if back := ParseEnviron(out.Bytes()); fmt.Sprint(back) != fmt.Sprint(env) {
			t.Fatalf("round trip: %v != %v", back, env)
		}
	})
}
