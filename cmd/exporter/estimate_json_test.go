package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/pkg/power/curves"
)

// --json carries each curve's watts, band and source, and the fallbacks,
// the same figures as the model's at that load.
func TestEstimateCommandJSON(t *testing.T) {
	out, errs, code := runEstimateArgs(t, "--cpu", "Frobnicator 9000", "--sockets", "1", "--threads", "8", "--load", "50", "--json")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var got estimateJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%v in:\n%s", err, out)
	}
	m, err := curves.Default()
	if err != nil {
		t.Fatal(err)
	}
	node := curves.Node{CPU: "Frobnicator 9000", Sockets: 1, Threads: 8}
	server, pkg, vm, err := estimateCurves(m, estimateArgs{node: node, load: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if got.CPU != "frobnicator 9000" || got.Tier != curves.TierGeneric || got.Microarchitecture != "" || got.Sockets != 1 ||
		got.Threads != 8 || got.MemoryGiB != 0 || got.LoadPercent != 50 || len(got.Warnings) != 0 || len(got.Curves) != 3 {
		t.Errorf("header %+v", got)
	}
	for name, c := range map[string]curves.Curve{"server": server, "package": pkg, "vm": vm} {
		e := c.At(0.5)
		want := curveJSON{Watts: e.Watts, LowerWatts: e.Lower, UpperWatts: e.Upper, Source: c.Info.Source, Tier: c.Info.Tier}
		if got.Curves[name] != want || !(want.LowerWatts < want.Watts && want.Watts < want.UpperWatts) || want.Source == "" {
			t.Errorf("%s: %+v, want %+v", name, got.Curves[name], want)
		}
	}
	// 8 vCPUs on CCF's average, as the text output says.
	sh := m.Fit().Shape
	if s50 := (sh[5] - sh[0]) / (sh[10] - sh[0]); !near(got.Curves["vm"].Watts, 8*(0.74+(3.5-0.74)*s50)) {
		t.Errorf("vm %v W", got.Curves["vm"].Watts)
	}
	if want := fallbacks(server, pkg, vm); !reflect.DeepEqual(got.Fallbacks, want) || len(want) < 3 ||
		!strings.HasPrefix(got.Fallbacks[0], `CPU "frobnicator 9000" not recognised`) {
		t.Errorf("fallbacks %q, want %q", got.Fallbacks, want)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// A load between 0 and 1 without a % is most likely a fraction: it is
// still read as percent, with a warning on stderr and in the JSON; with
// the %, or at 0 or 1 and above, nothing is said.
func TestEstimateCommandWarnsFractionLoad(t *testing.T) {
	base := []string{"--cpu", "Frobnicator 9000", "--sockets", "1", "--threads", "8"}
	for _, tc := range []struct {
		load string
		warn bool
		pct  float64
	}{
		{"0.5", true, 0.5}, {"0.99", true, 0.99}, {"0.5%", false, 0.5}, {"0", false, 0}, {"1", false, 1}, {"50", false, 50},
	} {
		out, errs, code := runEstimateArgs(t, append(base, "--load", tc.load, "--json")...)
		if code != 0 {
			t.Fatalf("%s: exit %d, %q", tc.load, code, errs)
		}
		var got estimateJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		said := strings.Contains(errs, "warning: --load "+tc.load+" is read as "+tc.load+"%") && strings.Contains(errs, "percent (0 to 100)")
		if said != tc.warn || (len(got.Warnings) == 1) != tc.warn || got.LoadPercent != tc.pct {
			t.Errorf("--load %s: stderr %q, warnings %q, load %v%%; want warned %v, %v%%", tc.load, errs, got.Warnings, got.LoadPercent, tc.warn, tc.pct)
		}
		// The text output warns the same way.
		_, errs, _ = runEstimateArgs(t, append(base, "--load", tc.load)...)
		if strings.Contains(errs, "warning:") != tc.warn {
			t.Errorf("--load %s text: stderr %q", tc.load, errs)
		}
	}
}
