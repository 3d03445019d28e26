package prometheus

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

// Both files parse and every expression is valid PromQL.
func TestPromtoolCheckRules(t *testing.T) {
	promtool := testenv.Tool(t, "promtool", "prometheus")
	out, err := exec.Command(promtool, append([]string{"check", "rules"}, Files...)...).CombinedOutput()
	t.Logf("promtool check rules:\n%s", out)
	if err != nil {
		t.Fatalf("promtool check rules: %v", err)
	}
	// 25 recording rules and 8 alerts: a rule dropped by accident shows.
	for _, want := range []string{"SUCCESS: 25 rules found", "SUCCESS: 8 rules found"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("promtool check rules: no %q", want)
		}
	}
}

// The unit tests in wattrace_test.yml: rule values (3 W node power, 0.6 W
// pod power, 3600 J per day, a held GPU's idle share 1 and 0) and every
// alert firing, or not, when it should (a GPU held idle: at 30 minutes,
// not before, never while its holder uses it).
func TestPromtoolTestRules(t *testing.T) {
	promtool := testenv.Tool(t, "promtool", "prometheus")
	out, err := exec.Command(promtool, "test", "rules", "wattrace_test.yml").CombinedOutput()
	t.Logf("promtool test rules:\n%s", out)
	if err != nil {
		t.Fatalf("promtool test rules: %v", err)
	}
}

// Rules reads all 29 rules with their expressions.
func TestRulesParse(t *testing.T) {
	rs, err := Rules()
	if err != nil {
		t.Fatal(err)
	}
	var records, alerts int
	for _, r := range rs {
		if r.Expr == "" {
			t.Errorf("%s: empty expr", r.Name())
		}
		if r.Record != "" {
			records++
		} else {
			alerts++
		}
	}
	if records != 25 || alerts != 8 {
		t.Errorf("got %d recording rules and %d alerts, want 25 and 8", records, alerts)
	}
}
