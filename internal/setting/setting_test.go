package setting

import (
	"errors"
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

// Parsed keeps the user's shape and reports a value its parser refuses
// at Check, naming the key, with the parser's reason; BoolIn stores into
// a map; AnyDuration has no check of its own.
func TestParsedBoolInAnyDuration(t *testing.T) {
	var pairs map[string]string
	on := map[string]bool{}
	var d time.Duration
	s := &Set{}
	parse := func(v string) (map[string]string, error) {
		out := map[string]string{}
		for _, kv := range strings.Split(v, ",") {
			if kv == "" {
				continue
			}
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, errors.New("want k=v pairs")
			}
			out[k] = val
		}
		return out, nil
	}
	Parsed(s, &pairs, "x.pairs", "", "", parse)
	BoolIn(s, on, "a", "x.a", true, "")
	s.AnyDuration(&d, "x.never", 0, "")
	s.FillDefaults()
	if pairs == nil || len(pairs) != 0 || !on["a"] || d != 0 {
		t.Fatalf("defaults: %v %v %v", pairs, on, d)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	s.Lookup("x.pairs").Assign("p=1,q=2")
	s.Lookup("x.a").Assign(false)
	if pairs["p"] != "1" || pairs["q"] != "2" || on["a"] {
		t.Fatalf("assigned: %v %v", pairs, on)
	}
	s.Lookup("x.pairs").Assign("p")
	if err := s.Check(); err == nil || err.Error() != `invalid value "p" for x.pairs: want k=v pairs` {
		t.Fatalf("bad pairs: %v", err)
	}
}

type level string

// StringsOf loads strings and stores the named type, its default
// included; AnyInt has no check of its own, so a value only another
// setting makes wrong is the declarer's to refuse.
func TestStringsOfAnyInt(t *testing.T) {
	var levels []level
	var n int
	s := &Set{}
	st := StringsOf(s, &levels, "x.levels", []level{"job", "pod"}, "")
	s.AnyInt(&n, "x.count", 7, "")
	if d, ok := st.Default.([]string); !ok || strings.Join(d, ",") != "job,pod" {
		t.Fatalf("default %#v, want []string{job, pod} for the flag", st.Default)
	}
	s.FillDefaults()
	if len(levels) != 2 || levels[1] != "pod" || n != 7 {
		t.Fatalf("defaults: %v %d", levels, n)
	}
	st.Assign([]string{"vm"})
	s.Lookup("x.count").Assign(-5)
	if len(levels) != 1 || levels[0] != level("vm") || n != -5 {
		t.Fatalf("assigned: %v %d", levels, n)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("AnyInt checked -5: %v", err)
	}
	st.Assign([]string(nil))
	if levels != nil {
		t.Fatalf("an empty list: %#v, want nil", levels)
	}
}

func (v *values) Declare(s *Set) { declare(s, v) }

// Try starts a block from its defaults, applies the change and checks
// the result, naming the key of a bad value.
func TestTry(t *testing.T) {
	v, err := Try[values](func(*values) {})
	if err != nil || *v != (values{n: 3, mode: "auto", path: "/run/x", wait: time.Second}) {
		t.Fatalf("defaults: %+v %v", v, err)
	}
	v, err = Try[values](func(v *values) { v.n, v.path = 0, "/srv" })
	if err == nil || err.Error() != `invalid value "0" for x.n: must be >= 1` || v.n != 0 || v.path != "/srv" || v.mode != "auto" {
		t.Errorf("x.n 0: %+v %v, want the change kept, the rest defaults, x.n named", v, err)
	}
}
