package testenv

import (
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// Promlint fails the test when the text exposition does not parse or has
// any finding of the linter `promtool check metrics` runs (naming, units,
// _total, help text). It is the same linter, in process, so the tests need
// no Prometheus installation.
func Promlint(t testing.TB, text []byte) {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("promlint: exposition does not parse: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
