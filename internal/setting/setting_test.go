package setting

import (
	"strings"
	"testing"
	"time"
)

type values struct {
	n    int
	mode string
	path string
	wait time.Duration
}

func declare(s *Set, v *values) {
	s.Int(&v.n, "x.n", 3, "", 1, "must be >= 1")
	s.Enum(&v.mode, "x.mode", "auto", []string{"auto", "off"}, "")
	s.String(&v.path, "x.path", "/run/x", "")
	s.Duration(&v.wait, "x.wait", time.Second, "")
}

func TestCheckNamesEveryKey(t *testing.T) {
	v := values{n: 0, mode: "on", path: "", wait: -time.Second}
	s := &Set{}
	declare(s, &v)
	err := s.Check()
	for _, want := range []string{`invalid value "0" for x.n: must be >= 1`, `invalid value "on" for x.mode: allowed auto, off`, `invalid value "-1s" for x.wait: must be > 0`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "x.path") {
		t.Errorf("an empty free-form string is valid: %v", err)
	}
}

// FillUnset defaults only what a check would refuse as unset: an empty
// enum, a zero duration. An empty path or a zero count may be meant.
func TestFillUnset(t *testing.T) {
	var v values
	s := &Set{}
	declare(s, &v)
	s.FillUnset()
	if v != (values{mode: "auto", wait: time.Second}) {
		t.Errorf("after FillUnset %+v, want mode auto and wait 1s only", v)
	}
	s.FillDefaults()
	if v != (values{n: 3, mode: "auto", path: "/run/x", wait: time.Second}) {
		t.Errorf("after FillDefaults %+v", v)
	}
}

func TestKeyDeclaredTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("a second x.n was accepted")
		}
	}()
	var a, b int
	s := &Set{}
	s.Int(&a, "x.n", 0, "", 0, "")
	s.Int(&b, "x.n", 0, "", 0, "")
}
