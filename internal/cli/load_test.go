package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/internal/setting"
)

type loaded struct {
	limit   map[string]float64
	every   time.Duration
	n       int
	enabled bool
}

func load(t *testing.T, yaml string, args ...string) (loaded, error) {
	t.Helper()
	var v loaded
	s := &setting.Set{}
	s.Map(&v.limit, "p.limit", "")
	s.Duration(&v.every, "p.every", time.Second, "")
	s.Int(&v.n, "p.n", 2, "", 0, "must be >= 0")
	s.Bool(&v.enabled, "p.enabled", false, "")
	l := Loader{Prefix: "CLITEST", Maps: func(k string) bool { return s.Lookup(k) != nil && s.Lookup(k).Kind == setting.Map }}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String(KeyConfigFile, "", "")
	AddFlags(fs, s)
	if yaml != "" {
		f := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config.file="+f)
	}
	d, _, err := l.Load(fs, args)
	if err != nil {
		return v, err
	}
	d.Decode(s)
	if err := d.Err(); err != nil {
		return v, err
	}
	return v, s.Check()
}

func TestLoadPrecedenceAndMaps(t *testing.T) {
	t.Setenv("CLITEST_P_N", "5")
	v, err := load(t, "p:\n  limit:\n    package: 400\n    dram: 50\n  every: 3s\n  n: 4\n", "--p.enabled")
	if err != nil {
		t.Fatal(err)
	}
	// The environment beats the file, a flag beats both; a nested map
	// folds back into the one setting.
	if v.n != 5 || v.every != 3*time.Second || !v.enabled || len(v.limit) != 2 || v.limit["package"] != 400 || v.limit["dram"] != 50 {
		t.Errorf("loaded %+v", v)
	}
	if v, err := load(t, "", "--p.limit=package=10,gpu=2.5", "--p.n=7"); err != nil || v.n != 7 || v.limit["gpu"] != 2.5 {
		t.Errorf("flags: %+v %v", v, err)
	}
}

func TestLoadRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		yaml string
		args []string
		want string
	}{
		"unknown key":      {"p:\n  limt: 3\n", nil, "unknown keys p.limt"},
		"flat and nested":  {"p.n: 1\np:\n  n: 2\n", nil, "key p.n is set twice"},
		"map entry twice":  {"p.limit.dram: 1\np:\n  limit:\n    dram: 2\n", nil, "is set twice"},
		"bare duration":    {"p:\n  every: 5\n", nil, `invalid value "5" for p.every: want a duration`},
		"check":            {"p:\n  n: -1\n", nil, `invalid value "-1" for p.n: must be >= 0`},
		"map not a number": {"", []string{"--p.limit=package=lots"}, `for p.limit: want zone=watts pairs`},
		"unexpected words": {"", []string{"stray"}, "unexpected arguments"},
	} {
		if _, err := load(t, c.yaml, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	// cast would read "1e3" as 1000; a number of things is written plainly.
	t.Setenv("CLITEST_P_N", "1e3")
	if _, err := load(t, ""); err == nil || !strings.Contains(err.Error(), `invalid value "1e3" for p.n: want an integer`) {
		t.Errorf("1e3 from the environment: %v", err)
	}
}

// NewFlagSet gives every program config.file and version first, then
// the declared settings in the order declared (--help's), each with its
// type and default; version is no setting of the file or environment.
func TestNewFlagSet(t *testing.T) {
	var v loaded
	s := &setting.Set{}
	s.Int(&v.n, "p.n", 2, "A count.", 0, "must be >= 0")
	s.Duration(&v.every, "p.every", time.Second, "How often.")
	fs := NewFlagSet("t", "p.n: 3", s)
	var got []string
	fs.VisitAll(func(f *pflag.Flag) { got = append(got, f.Name+" "+f.Value.Type()+" "+f.DefValue) })
	if want := "config.file string ,version bool false,p.n int 2,p.every duration 1s"; strings.Join(got, ",") != want {
		t.Errorf("flags %q, want %q", strings.Join(got, ","), want)
	}
	if u := fs.Lookup(KeyConfigFile).Usage; !strings.HasSuffix(u, "e.g. p.n: 3.") {
		t.Errorf("config.file's help %q", u)
	}
	l := Loader{Prefix: "CLITEST", NotSettings: map[string]bool{KeyVersion: true}}
	t.Setenv("CLITEST_VERSION", "true")
	t.Setenv("CLITEST_P_N", "5")
	d, _, err := l.Load(fs, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Decode(s)
	if on, _ := fs.GetBool(KeyVersion); on || v.n != 5 || d.Err() != nil {
		t.Errorf("version %v from the environment, p.n %d, %v", on, v.n, d.Err())
	}
}
