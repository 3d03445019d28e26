package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// docDefault renders a flag's default as the documentation shows it.
func docDefault(f *pflag.Flag) string {
	d := f.DefValue
	if f.Value.Type() == "stringSlice" {
		d = strings.Trim(d, "[]")
	}
	if d == "" {
		return "(none)"
	}
	return "`" + d + "`"
}

// docRow is one row of the configuration reference tables.
func docRow(f *pflag.Flag) (flag, env, def string) {
	env = "`" + EnvVar(f.Name) + "`"
	if loader.NotSettings[f.Name] {
		env = "—"
	}
	return "`--" + f.Name + "`", env, docDefault(f)
}

// TestDocsListEveryFlag keeps the configuration reference in README.md and
// docs/configuration.md in step with the flags: each flag must have a row
// | `--flag` | `WATTRACE_ENV` | default | meaning | with the right
// environment variable and default, and no row may name a flag that does
// not exist.
func TestDocsListEveryFlag(t *testing.T) {
	for _, doc := range []string{"../../README.md", "../../docs/configuration.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string][]string{}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "| `--") {
				continue
			}
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if len(cells) < 4 {
				t.Errorf("%s: row needs flag, environment, default, meaning: %q", doc, line)
				continue
			}
			rows[cells[0]] = cells
		}
		fs := NewFlagSet("wattrace")
		fs.VisitAll(func(f *pflag.Flag) {
			flag, env, def := docRow(f)
			row, ok := rows[flag]
			if !ok {
				t.Errorf("%s: no row for %s (| %s | %s | %s | ... |)", doc, flag, flag, env, def)
				return
			}
			delete(rows, flag)
			if row[1] != env {
				t.Errorf("%s: %s environment is %s, want %s", doc, flag, row[1], env)
			}
			if row[2] != def {
				t.Errorf("%s: %s default is %s, want %s", doc, flag, row[2], def)
			}
		})
		for flag := range rows {
			t.Errorf("%s: documents %s, which is not a flag", doc, flag)
		}
	}
}
