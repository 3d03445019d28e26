package profiling

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wattrace/wattrace/internal/procpid"
)

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
	if err == nil || !procpid.Vanished(err) {
		t.Errorf("MatchPID of a missing pid: %v, want a Vanished error", err)
	}
}

// FuzzFilterMatch checks that Filter.Match agrees with the parsed
// environment on arbitrary bytes: a non-empty value opts in, nothing else.
func FuzzFilterMatch(f *testing.F) {
	for _, s := range []string{
		"", "A=1\x00B=2\x00", "=x\x00y\x00", "\x00\x00",
		"WATTRACE_PROFILE=1\x00", "WATTRACE_PROFILE=\x00WATTRACE_PROFILE=1", "\xff=\xfe\x00",
	} {
		f.Add([]byte(s))
	}
	filter, err := NewFilter([]string{DefaultEnvVar})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, inMap := procpid.ParseEnviron(b)[DefaultEnvVar]
		if _, ok := filter.Match(b); ok != (inMap && v != "") {
			t.Fatalf("Match = %v, map value %q (present %v)", ok, v, inMap)
		}
	})
}
