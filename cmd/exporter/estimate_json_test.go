package main

import (
	"encoding/json"
	"fmt"
	"math"
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

// --steal changes the vm figures only, as the exporter's VM estimator
// does (docs/vm.md's worked example): 4 vCPUs of a Cascade Lake host busy
// 35% of the interval with 30% stolen run at 50% of the time they had,
// 2.76 + 0.7 × (9.3078 − 2.76) = 7.34 W in a band 5.91 to 11.77 W.
func TestEstimateCommandSteal(t *testing.T) {
	args := []string{"--cpu", "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", "--sockets", "1", "--threads", "4", "--memory-gib", "16", "--load", "35"}
	out, errs, code := runEstimateArgs(t, append(args, "--steal", "30%", "--json")...)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var got estimateJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	plain, _, _ := runEstimateArgs(t, append(args, "--json")...)
	var before estimateJSON
	if err := json.Unmarshal([]byte(plain), &before); err != nil {
		t.Fatal(err)
	}
	vm := got.Curves["vm"]
	if got.StealPercent != 30 || math.Abs(vm.Watts-7.3435) > 5e-5 || math.Abs(vm.LowerWatts-5.9119) > 5e-5 || math.Abs(vm.UpperWatts-11.7698) > 5e-5 {
		t.Errorf("vm with 30%% stolen: %+v (steal %v), want 7.3435 W in [5.9119, 11.7698]", vm, got.StealPercent)
	}
	if b := before.Curves["vm"]; before.StealPercent != 0 || math.Abs(b.Watts-7.7757) > 5e-5 {
		t.Errorf("vm without steal: %+v, want the curve at 35%%, 7.7757 W", b)
	}
	for _, name := range []string{"server", "package"} {
		if got.Curves[name] != before.Curves[name] {
			t.Errorf("%s: %+v with steal, %+v without: steal is for the vm figures only", name, got.Curves[name], before.Curves[name])
		}
	}
	text, _, _ := runEstimateArgs(t, append(args, "--steal", "30")...)
	if !strings.Contains(text, "load 35%, 30% stolen (vm)") || !strings.Contains(text, fmt.Sprintf("%-9s %7.1f W  band %7.1f .. %7.1f W", "vm:", 7.3, 5.9, 11.8)) {
		t.Errorf("text output:\n%s", text)
	}
	for _, bad := range [][]string{{"--steal", "101"}, {"--steal", "x"}, {"--steal", "-1"}, {"--steal", "70", "--load", "35"}} {
		a := append(append([]string{}, args...), bad...)
		if _, errs, code := runEstimateArgs(t, a...); code != 2 || !strings.Contains(errs, "--") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and the flag named", bad, code, errs)
		}
	}
}
