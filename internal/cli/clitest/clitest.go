// Package clitest holds what the tests of wattrace's programs (the
// exporter, wattrace-api) share about settings loaded through
// internal/cli: a case's flags, environment and file turned into
// arguments, the settings surface rendered for golden files, a good value
// of each flag, every setting read from each source, and main run up to
// its configuration. Each program keeps its own data: its bad values, its
// good values, which settings need which others, how a case loads.
package clitest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/cli"
)

// FilePrefix starts a case's entry that is a configuration file's body.
const FilePrefix = "file:"

// Args turns a case into a program's arguments. A case is flag
// arguments, "PREFIX_KEY=value" entries (prefix is the program's
// environment prefix, cli.Loader.Prefix), set for the rest of t, and at
// most one file body after FilePrefix, written to file and named by
// --config.file.
func Args(t *testing.T, c []string, prefix, file string) []string {
	t.Helper()
	var args []string
	for _, a := range c {
		switch {
		case strings.HasPrefix(a, FilePrefix):
			if err := os.WriteFile(file, []byte(strings.TrimPrefix(a, FilePrefix)), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--"+cli.KeyConfigFile+"="+file)
		case strings.HasPrefix(a, prefix+"_"):
			k, v, _ := strings.Cut(a, "=")
			t.Setenv(k, v)
		default:
			args = append(args, a)
		}
	}
	return args
}

// SurfaceFlags renders every flag of fs as --help shows it (pflag's usage
// line: name, type, help, default), one block per flag in fs's order,
// with its environment variable (envVar) and whether the file and the
// environment may set it.
func SurfaceFlags(fs *pflag.FlagSet, envVar func(key string) string) string {
	var b strings.Builder
	fs.VisitAll(func(f *pflag.Flag) {
		one := pflag.NewFlagSet("one", pflag.ContinueOnError)
		one.AddFlag(f)
		b.WriteString(strings.TrimSpace(one.FlagUsagesWrapped(0)) + "\n")
		from := "flag, file, env " + envVar(f.Name)
		switch f.Name {
		case cli.KeyVersion:
			from = "flag only"
		case cli.KeyConfigFile:
			from = "flag, env " + envVar(f.Name)
		}
		fmt.Fprintf(&b, "    type %s, default %q, from %s\n", f.Value.Type(), f.DefValue, from)
	})
	return b.String()
}

// SurfaceErrors renders each bad case with its error ("no error" when it
// loads), each case loaded in a subtest of its own by load, which returns
// the error and what makes its message stable (the case's paths
// replaced; nil for nothing).
func SurfaceErrors(t *testing.T, cases [][]string, load func(t *testing.T, i int, c []string) (stable func(string) string, err error)) string {
	var b strings.Builder
	for i, c := range cases {
		t.Run(strings.Join(c, " "), func(t *testing.T) {
			stable, err := load(t, i, c)
			msg := "no error"
			if err != nil {
				msg = err.Error()
				if stable != nil {
					msg = stable(msg)
				}
			}
			fmt.Fprintf(&b, "%q\n    %s\n", c, strings.ReplaceAll(msg, "\n", "\n    "))
		})
	}
	return b.String()
}

// Golden holds got to the golden file name, or rewrites it with got when
// update is set (the test's -update flag).
func Golden(t *testing.T, update bool, name, got string) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -run %s -update rewrites it):\n%s", name, t.Name(), FirstDiff(string(want), got))
	}
}

// FirstDiff shows where got first departs from want, line by line, so a
// change of order shows as well as a changed line.
func FirstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, wl, gl)
		}
	}
	return ""
}

// GoodValue is a valid value of f other than its default: given's when
// it has one for f, else one its type suggests.
func GoodValue(f *pflag.Flag, given map[string]string) string {
	if v, ok := given[f.Name]; ok {
		return v
	}
	switch f.Value.Type() {
	case "bool":
		if f.DefValue == "true" {
			return "false"
		}
		return "true"
	case "duration":
		return "7m"
	case "int":
		return "3"
	case "float64":
		if f.DefValue == "0.5" {
			return "0.25"
		}
		return "0.5"
	case "stringSlice":
		return "x,y"
	}
	return "/srv/" + strings.ReplaceAll(f.Name, ".", "-")
}

// Sources says how EverySettingFromEachSource reads one program's
// settings.
type Sources[C any] struct {
	// Flags are the program's flags.
	Flags *pflag.FlagSet
	// EnvVar is the environment variable of a key.
	EnvVar func(key string) string
	// Value is the good value of f the test sets from each source.
	Value func(f *pflag.Flag) string
	// Needs are the other settings a good value of key needs, given as
	// flags whichever source the setting under test comes from.
	Needs func(key string) []string
	// Load loads case c (Args' form) with key the setting under test, ""
	// for the baselines.
	Load func(t *testing.T, key string, c []string) (*C, error)
	// Unfile clears the configuration file's path from a configuration,
	// which a case from the file has and one from a flag has not.
	Unfile func(*C)
}

// load is s.Load, the configuration's file path cleared.
func (s Sources[C]) load(t *testing.T, key string, c []string) (*C, error) {
	t.Helper()
	cfg, err := s.Load(t, key, c)
	if cfg != nil {
		s.Unfile(cfg)
	}
	return cfg, err
}

// EverySettingFromEachSource: every setting of s.Flags (but the version
// and the configuration file) is read from its flag, its environment
// variable and its file key (flat and nested), each giving the same
// configuration, which differs from the defaults (or from the settings it
// needs alone). Each source's case runs in a subtest of its own, so that
// an environment variable one sets is gone before the next.
func EverySettingFromEachSource[C any](t *testing.T, s Sources[C]) {
	t.Helper()
	def, err := s.load(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Flags.VisitAll(func(f *pflag.Flag) {
		if f.Name == cli.KeyVersion || f.Name == cli.KeyConfigFile {
			return
		}
		v, needs := s.Value(f), s.Needs(f.Name)
		t.Run(f.Name, func(t *testing.T) {
			fromFlag, err := s.load(t, f.Name, append([]string{"--" + f.Name + "=" + v}, needs...))
			if err != nil {
				t.Fatalf("--%s=%s: %v", f.Name, v, err)
			}
			// The settings it needs alone are the baseline the setting
			// must change, so that they cannot stand in for it.
			base := def
			if len(needs) > 0 {
				if base, err = s.load(t, "", needs); err != nil {
					t.Fatalf("%q alone: %v", needs, err)
				}
			}
			if reflect.DeepEqual(fromFlag, base) {
				t.Fatalf("--%s=%s leaves the configuration at its defaults (with %q)", f.Name, v, needs)
			}
			nested := f.Name
			if i := strings.IndexByte(nested, '.'); i > 0 {
				nested = nested[:i] + ":\n  " + nested[i+1:]
			}
			for _, c := range []struct {
				source string
				entry  string
			}{
				{"env", s.EnvVar(f.Name) + "=" + v},
				{"file", FilePrefix + f.Name + ": \"" + v + "\"\n"},
				{"file-nested", FilePrefix + nested + ": \"" + v + "\"\n"},
			} {
				t.Run(c.source, func(t *testing.T) {
					got, err := s.load(t, f.Name, append([]string{c.entry}, needs...))
					if err != nil {
						t.Fatalf("%q: %v", c.entry, err)
					}
					if !reflect.DeepEqual(got, fromFlag) {
						t.Errorf("%q gives another configuration than --%s=%s:\n%+v\n%+v", c.entry, f.Name, v, got, fromFlag)
					}
				})
			}
		})
	})
}

// StopsStartUp runs main's path (cli.Main) with p, its Run replaced by
// one that records that it ran, and returns the exit code, whether Run
// ran, and what went to stdout and stderr.
func StopsStartUp[C any](p cli.Program[C], args []string) (code int, ran bool, stdout, stderr string) {
	var out, errOut strings.Builder
	p.Run = func(context.Context, C, *zap.Logger) error { ran = true; return nil }
	code = cli.Main(p, args, &out, &errOut)
	return code, ran, out.String(), errOut.String()
}
