package main

import (
	"context"
	"testing"
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
