package measure

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Write writes the report in format.
func Write(w io.Writer, format string, rep Report) error {
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case FormatCSV:
		return writeCSV(w, rep)
	}
	return writeTable(w, rep)
}

// csvColumns are the CSV report's columns, in order.
var csvColumns = []string{"record", "run", "exit_status", "interrupted", "wall_seconds", "cpu_seconds",
	"user_seconds", "system_seconds", "node_cpu_seconds", "cpu_share", "energy_joules", "dynamic_joules",
	"idle_joules", "node_energy_joules", "average_watts", "grams"}

func writeCSV(w io.Writer, rep Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(csvColumns)
	for _, r := range rep.Runs {
		_ = cw.Write([]string{"run", strconv.Itoa(r.Run), strconv.Itoa(r.ExitStatus), strconv.FormatBool(r.Interrupted),
			num(r.WallSeconds), num(r.CPUSeconds), num(r.UserSeconds), num(r.SystemSeconds), num(r.NodeCPUSeconds),
			num(r.CPUShare), num(r.EnergyJ), num(r.DynamicJ), num(r.IdleJ), num(r.NodeEnergyJ), num(r.AverageW), num(r.Grams)})
	}
	s := rep.Summary
	stats := []Stat{s.WallSeconds, s.CPUSeconds, s.EnergyJ, s.DynamicJ, s.IdleJ, s.NodeEnergyJ, s.AverageW, s.Grams}
	for _, row := range []struct {
		name string
		get  func(Stat) (float64, bool)
	}{
		{"mean", func(s Stat) (float64, bool) { return s.Mean, s.N > 0 }},
		{"stddev", ptr(func(s Stat) *float64 { return s.StdDev })},
		{"stderr", ptr(func(s Stat) *float64 { return s.StdErr })},
		{"min", func(s Stat) (float64, bool) { return s.Min, s.N > 0 }},
		{"median", func(s Stat) (float64, bool) { return s.Median, s.N > 0 }},
		{"max", func(s Stat) (float64, bool) { return s.Max, s.N > 0 }},
		{"ci95_low", func(s Stat) (float64, bool) {
			if s.CI95 == nil {
				return 0, false
			}
			return s.CI95[0], true
		}},
		{"ci95_high", func(s Stat) (float64, bool) {
			if s.CI95 == nil {
				return 0, false
			}
			return s.CI95[1], true
		}},
	} {
		v := func(i int) string {
			x, ok := row.get(stats[i])
			if !ok {
				return ""
			}
			return num(x)
		}
		_ = cw.Write([]string{row.name, strconv.Itoa(s.Runs), strconv.Itoa(s.ExitStatus), strconv.FormatBool(s.Interrupted),
			v(0), v(1), "", "", "", "", v(2), v(3), v(4), v(5), v(6), v(7)})
	}
	cw.Flush()
	return cw.Error()
}

func ptr(f func(Stat) *float64) func(Stat) (float64, bool) {
	return func(s Stat) (float64, bool) {
		if p := f(s); p != nil {
			return *p, true
		}
		return 0, false
	}
}

func num(x float64) string { return strconv.FormatFloat(x, 'g', 10, 64) }

// writeTable is the human report, like perf stat's.
func writeTable(w io.Writer, rep Report) error {
	b := &strings.Builder{}
	runs := len(rep.Runs)
	fmt.Fprintf(b, "\n Energy of '%s'", strings.Join(rep.Command, " "))
	if rep.Summary.Runs > 1 {
		fmt.Fprintf(b, " (%d runs)", rep.Summary.Runs)
	}
	b.WriteString(":\n\n")
	place := rep.Cgroup
	if rep.Hierarchy != "" && place != PlaceNone {
		place += " cgroup (" + rep.Hierarchy + ")"
	}
	acct := rep.Accounting
	var notes []string
	if rep.BPFPrograms != "" {
		notes = append(notes, "programs "+rep.BPFPrograms)
	}
	if rep.CPURead != "" {
		notes = append(notes, "reads the "+rep.CPURead)
	}
	if len(notes) > 0 {
		acct += " (" + strings.Join(notes, ", ") + ")"
	}
	fmt.Fprintf(b, "   accounting  %s, %s\n", acct, place)
	fmt.Fprintf(b, "   meter       %s\n", rep.Meter)
	idle := "none (all energy is dynamic; --idle S measures a baseline)"
	switch rep.Baseline.Source {
	case "measured":
		idle = fmt.Sprintf("measured over %s (%s)", si(rep.Baseline.Seconds, "s"), watts(rep.Baseline.Watts))
	case "model":
		idle = "the meter's model (" + watts(rep.Baseline.Watts) + ")"
	}
	fmt.Fprintf(b, "   idle        %s; idle policy %s\n\n", idle, rep.IdlePolicy)
	if runs == 0 {
		b.WriteString("   (no run completed)\n")
		writeNotes(b, rep)
		_, err := io.WriteString(w, b.String())
		return err
	}

	// One run: its figures; several: the mean, ± the standard error of
	// the mean relative to it (as perf stat prints), then the statistics.
	s := rep.Summary
	src := rep.Runs
	if s.Runs > 0 {
		src = completed(rep.Runs)
	}
	pm := func(st Stat) string {
		if st.StdErr == nil || st.Mean == 0 {
			return ""
		}
		return fmt.Sprintf("  ( ± %.2f%% )", 100**st.StdErr/math.Abs(st.Mean))
	}
	mean := func(f func(Run) float64) float64 {
		var t float64
		for _, r := range src {
			t += f(r)
		}
		return t / float64(len(src))
	}
	row := func(v, what, extra string) { fmt.Fprintf(b, "%16s   %s%s\n", v, what, extra) }
	row(si(mean(func(r Run) float64 { return r.WallSeconds }), "s"), "wall time", pm(s.WallSeconds))
	row(si(mean(func(r Run) float64 { return r.CPUSeconds }), "s"), fmt.Sprintf("CPU (user %s, system %s)",
		si(mean(func(r Run) float64 { return r.UserSeconds }), "s"), si(mean(func(r Run) float64 { return r.SystemSeconds }), "s")), pm(s.CPUSeconds))
	row(fmt.Sprintf("%.2f %%", 100*mean(func(r Run) float64 { return r.CPUShare })), "of the node's CPU time", "")
	row(si(mean(func(r Run) float64 { return r.EnergyJ }), "J"), "energy of the command", pm(s.EnergyJ))
	row(si(mean(func(r Run) float64 { return r.DynamicJ }), "J"), "  dynamic, by its CPU share", pm(s.DynamicJ))
	row(si(mean(func(r Run) float64 { return r.IdleJ }), "J"), "  idle, by policy "+rep.IdlePolicy, pm(s.IdleJ))
	row(si(mean(func(r Run) float64 { return r.NodeEnergyJ }), "J"), "node energy over the same time", pm(s.NodeEnergyJ))
	row(si(mean(func(r Run) float64 { return r.AverageW }), "W"), fmt.Sprintf("average power (node %s)",
		si(mean(func(r Run) float64 { return r.NodeAverageW }), "W")), pm(s.AverageW))
	row(si(mean(func(r Run) float64 { return r.Grams }), "g"), fmt.Sprintf("CO2e at %g g/kWh (%s)", rep.GramsPerKWh, rep.CarbonSource), pm(s.Grams))
	if s.Runs > 1 {
		b.WriteString("\n   ( ± x% ) is the standard error of the mean, as perf stat's; σ is the runs' standard deviation\n")
	}

	b.WriteString("\n   zone        method     source           node    node idle  command dynamic  command idle\n")
	var clamped []string
	for _, z := range meanZones(src) {
		key := zoneKey(z.Zone, z.Socket)
		fmt.Fprintf(b, "   %-11s %-10s %-9s %12s %12s %16s %13s\n", key, z.Method, z.Source,
			si(z.NodeJ, "J"), si(z.NodeIdleJ, "J"), si(z.DynamicJ, "J"), si(z.IdleJ, "J"))
		if z.Band != nil {
			fmt.Fprintf(b, "   %-11s band of the command's energy: [%s, %s]\n", "", si(z.Band[0], "J"), si(z.Band[1], "J"))
		}
		if z.IdleClamped {
			clamped = append(clamped, key)
		}
	}
	for _, k := range clamped {
		fmt.Fprintf(b, "   %-11s idle clamped: the baseline's idle power exceeded the zone's energy (the baseline was measured while the node drew more)\n", k)
	}
	if s.Runs > 1 {
		fmt.Fprintf(b, "\n   over %d runs     %-24s %-11s %-11s %-11s %s\n", s.Runs, "mean ± standard error", "σ", "min", "median", "max")
		stats := []struct {
			what, unit string
			st         Stat
		}{{"wall time", "s", s.WallSeconds}, {"CPU", "s", s.CPUSeconds}, {"energy", "J", s.EnergyJ},
			{"average power", "W", s.AverageW}, {"CO2e", "g", s.Grams}}
		for _, c := range stats {
			fmt.Fprintf(b, "   %-15s %-24s %-11s %-11s %-11s %s\n", c.what, si(c.st.Mean, c.unit)+" ± "+si(*c.st.StdErr, c.unit),
				si(*c.st.StdDev, c.unit), si(c.st.Min, c.unit), si(c.st.Median, c.unit), si(c.st.Max, c.unit))
		}
		b.WriteString("\n   95% confidence interval of the mean (Student's t):\n")
		for _, c := range stats[:4] {
			if c.st.CI95 != nil {
				fmt.Fprintf(b, "   %-14s [%s, %s]\n", c.what, si(c.st.CI95[0], c.unit), si(c.st.CI95[1], c.unit))
			}
		}
	}
	writeNotes(b, rep)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeNotes(b *strings.Builder, rep Report) {
	if rep.Summary.Interrupted {
		b.WriteString("\n   INTERRUPTED: partial report")
		for _, r := range rep.Runs {
			if r.Interrupted {
				fmt.Fprintf(b, " (run %d stopped after %.3f s", r.Run, r.WallSeconds)
				if len(r.Signals) > 0 {
					fmt.Fprintf(b, " by %s", strings.Join(r.Signals, ", "))
				}
				b.WriteString(")")
			}
		}
		b.WriteString("\n")
	}
	switch {
	case rep.Summary.NotMeasured:
		fmt.Fprintf(b, "\n   the command was not measured; measure exits with status %d\n", rep.Summary.ExitStatus)
	case rep.Summary.ExitStatus != 0:
		fmt.Fprintf(b, "\n   the command exited with status %d\n", rep.Summary.ExitStatus)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(b, "   warning: %s\n", w)
	}
	b.WriteString("\n")
}

func completed(runs []Run) []Run {
	var out []Run
	for _, r := range runs {
		if !r.Interrupted {
			out = append(out, r)
		}
	}
	return out
}

// meanZones averages each zone over the runs.
func meanZones(runs []Run) []Zone {
	var out []Zone
	idx := map[string]int{}
	for _, r := range runs {
		for _, z := range r.Zones {
			k := z.Source + "/" + zoneKey(z.Zone, z.Socket)
			i, ok := idx[k]
			if !ok {
				i = len(out)
				idx[k] = i
				c := z
				c.NodeJ, c.NodeIdleJ, c.NodeDynamicJ, c.DynamicJ, c.IdleJ, c.Band = 0, 0, 0, 0, 0, nil
				out = append(out, c)
			}
			n := float64(len(runs))
			o := &out[i]
			o.NodeJ += z.NodeJ / n
			o.NodeIdleJ += z.NodeIdleJ / n
			o.NodeDynamicJ += z.NodeDynamicJ / n
			o.DynamicJ += z.DynamicJ / n
			o.IdleJ += z.IdleJ / n
			o.IdleClamped = o.IdleClamped || z.IdleClamped
			if z.Band != nil {
				if o.Band == nil {
					o.Band = &[2]float64{}
				}
				o.Band[0] += z.Band[0] / n
				o.Band[1] += z.Band[1] / n
			}
		}
	}
	return out
}

// prefixes are the scales each unit is printed in, smallest first.
var prefixes = map[string][]struct {
	name   string
	factor float64
}{
	"s": {{"µs", 1e-6}, {"ms", 1e-3}, {"s", 1}},
	"J": {{"µJ", 1e-6}, {"mJ", 1e-3}, {"J", 1}, {"kJ", 1e3}, {"MJ", 1e6}},
	"W": {{"µW", 1e-6}, {"mW", 1e-3}, {"W", 1}, {"kW", 1e3}},
	"g": {{"µg", 1e-6}, {"mg", 1e-3}, {"g", 1}, {"kg", 1e3}},
}

// si prints x in the unit's scale that puts it in [1, 1000) (the
// smallest or largest scale beyond them), with four significant digits:
// 0.0123 J is "12.30 mJ", 1234.5 J "1.235 kJ".
func si(x float64, unit string) string {
	ps := prefixes[unit]
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) || len(ps) == 0 {
		return strconv.FormatFloat(x, 'g', 4, 64) + " " + unit
	}
	p := ps[0]
	for _, q := range ps {
		if math.Abs(x) >= q.factor {
			p = q
		}
	}
	v := x / p.factor
	dec := 3 - int(math.Floor(math.Log10(math.Abs(v))))
	dec = min(max(dec, 0), 3)
	if s := strconv.FormatFloat(v, 'f', dec, 64); len(strings.TrimLeft(s, "-")) > 5 && dec > 0 {
		// Rounding carried into a new digit (999.95 → "1000.0").
		dec--
	}
	return strconv.FormatFloat(v, 'f', dec, 64) + " " + p.name
}

func watts(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + si(m[k], "W")
	}
	return strings.Join(parts, ", ")
}
