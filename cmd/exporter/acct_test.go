package main

import (
	"context"
	"strings"
	"testing"
)

// `wattrace acct` is dispatched to internal/units/acct: a usage error is its
// exit status 2 with its message, before anything is read or asked.
func TestAcctIsACommand(t *testing.T) {
	c, ok := lookup(commands(), []string{"acct", "--json", "--csv"})
	if !ok {
		t.Fatal("no acct command")
	}
	var out, errb strings.Builder
	code := c.run(context.Background(), []string{"--json", "--csv"}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
	if code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "wattrace acct: --json and --csv exclude each other") {
		t.Errorf("status %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
