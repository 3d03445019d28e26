package testenv

import (
	"strings"
	"testing"
)

// The linter must find what promtool finds; a helper that passes anything
// would let every metrics test pass too.
func TestPromlintFindsProblems(t *testing.T) {
	good := "# HELP wattrace_x_joules_total Energy.\n# TYPE wattrace_x_joules_total counter\nwattrace_x_joules_total 1\n"
	ft := &fakeTB{TB: t}
	Promlint(ft, []byte(good))
	if len(ft.errs) != 0 {
		t.Fatalf("clean exposition flagged: %q", ft.errs)
	}
	for name, text := range map[string]string{
		"counter without _total": "# HELP wattrace_x_joules Energy.\n# TYPE wattrace_x_joules counter\nwattrace_x_joules 1\n",
		"no help":                "# TYPE wattrace_x_total counter\nwattrace_x_total 1\n",
		"non-base unit":          "# HELP wattrace_x_milliseconds Time.\n# TYPE wattrace_x_milliseconds gauge\nwattrace_x_milliseconds 1\n",
		"does not parse":         "wattrace_x{ 1\n",
	} {
		ft := &fakeTB{TB: t}
		func() {
			defer func() { _ = recover() }()
			Promlint(ft, []byte(text))
		}()
		if len(ft.errs) == 0 {
			t.Errorf("%s: no finding for %q", name, text)
		}
	}
}

// fakeTB records failures instead of failing the outer test.
type fakeTB struct {
	testing.TB
	errs []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.errs = append(f.errs, strings.TrimSpace(format))
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.errs = append(f.errs, strings.TrimSpace(format))
	panic("fatal")
}
