package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// docRow renders a flag's row of the configuration table in
// docs/units-server.md.
func docRow(f *pflag.Flag) string {
	env := "`" + EnvVar(f.Name) + "`"
	if loader.NotSettings[f.Name] {
		env = "—"
	}
	def := f.DefValue
	if f.Value.Type() == "stringSlice" {
		def = strings.Trim(def, "[]")
	}
	if def == "" {
		def = "(none)"
	} else {
		def = "`" + def + "`"
	}
	return fmt.Sprintf("| `--%s` | %s | %s |", f.Name, env, def)
}

// TestDocsListEveryFlag keeps docs/units-server.md's configuration table
// in step with the flags: a row per flag, with its environment variable
// and default, and no row for a flag that does not exist.
func TestDocsListEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../docs/units-server.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `--") {
			cells := strings.Split(line, " | ")
			rows[strings.TrimPrefix(cells[0], "| ")] = line
		}
	}
	NewFlagSet("x").VisitAll(func(f *pflag.Flag) {
		want := docRow(f)
		key := "`--" + f.Name + "`"
		got, ok := rows[key]
		delete(rows, key)
		if !ok || !strings.HasPrefix(got, want) {
			t.Errorf("docs/units-server.md: want a row starting %q, have %q", want+" …", got)
		}
	})
	for k := range rows {
		t.Errorf("docs/units-server.md: row for unknown flag %s", k)
	}
}
