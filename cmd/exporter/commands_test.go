package main

import (
	"context"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/measure"
)

func TestLookupDispatchesOnlyNamedCommands(t *testing.T) {
	var got []string
	table := []command{{name: "measure", run: func(_ context.Context, args []string, _ stdio) int {
		got = args
		return 3
	}}}
	for _, args := range [][]string{nil, {}, {"--web.listen-address=:1"}, {"measures"}, {"-measure"}} {
		if _, ok := lookup(table, args); ok {
			t.Errorf("lookup(%q) found a command; the exporter's flags must fall through", args)
		}
	}
	c, ok := lookup(table, []string{"measure", "--", "true"})
	if !ok {
		t.Fatal("lookup(measure) found nothing")
	}
	if code := c.run(context.Background(), []string{"--", "true"}, stdio{}); code != 3 || len(got) != 2 || got[1] != "true" {
		t.Fatalf("run: code %d args %q, want 3 and [-- true]", code, got)
	}
}

func TestCommandNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands() {
		if c.name == "" || c.run == nil || c.summary == "" {
			t.Errorf("command %q lacks a name, summary or run", c.name)
		}
		if seen[c.name] {
			t.Errorf("command %q listed twice", c.name)
		}
		seen[c.name] = true
	}
}

// `wattrace measure` is a row of the table and reaches internal/measure: bad
// input gets measure's usage status and one line, not the exporter's flags.
func TestMeasureIsACommand(t *testing.T) {
	c, ok := lookup(commands(), []string{"measure", "-r", "0", "--", "true"})
	if !ok {
		t.Fatal("no measure command")
	}
	var out, errb strings.Builder
	code := c.run(context.Background(), []string{"-r", "0", "--", "true"}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
	if code != measure.ExitUsage || out.Len() != 0 || !strings.HasPrefix(errb.String(), "wattrace measure: invalid value 0 for -r/--repeat") {
		t.Errorf("status %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
