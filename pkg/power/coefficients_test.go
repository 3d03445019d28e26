package power

import (
	"strings"
	"testing"
)

func TestCoefficientTableLoads(t *testing.T) {
	table, err := loadCoefficientTable()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.Source, "ccf-coefficients") || !strings.Contains(table.Source, "b0032d928c787cf76cecd7d1d611c5b46f366e29") {
		t.Errorf("table source %q does not cite the ccf-coefficients commit", table.Source)
	}
	if len(table.Architectures) < 15 {
		t.Errorf("only %d architecture rows", len(table.Architectures))
	}
	if table.Average.MinW != 0.74 || table.Average.MaxW != 3.5 {
		t.Errorf("average row = %v/%v, want CCF's AWS 0.74/3.5", table.Average.MinW, table.Average.MaxW)
	}
	for _, r := range table.Architectures {
		if len(r.Match) == 0 {
			t.Errorf("row %q has no match patterns", r.Arch)
		}
		if !strings.Contains(r.Source, "Cloud Carbon Footprint") {
			t.Errorf("row %q source %q is not a citation", r.Arch, r.Source)
		}
	}
}

func TestLookupCoefficients(t *testing.T) {
	tests := []struct {
		model    string
		arch     string
		min, max float64
	}{
		{"Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "Cascade Lake", 0.69, 4.06},
		{"AMD EPYC 7B13 64-Core Processor", "EPYC 3rd Gen", 0.46, 1.96},
		{"Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz", "Skylake", 0.61, 4.10},
		{"Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", "Skylake", 0.61, 4.10},
		{"Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "Ice Lake", 0.77, 3.76},
		{"Intel(R) Xeon(R) Platinum 8488C", "Sapphire Rapids", 1.04, 4.16},
		{"INTEL(R) XEON(R) PLATINUM 8559C", "Emerald Rapids", 0.81, 4.48},
		{"Intel(R) Xeon(R) 6975P-C", "Granite Rapids", 0.58, 2.53},
		{"Intel(R) Xeon(R) E-2278G CPU @ 3.40GHz", "Coffee Lake", 1.14, 5.42},
		{"Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", "Broadwell", 0.71, 3.69},
		{"Intel(R) Xeon(R) CPU E5-2676 v3 @ 2.40GHz", "Haswell", 1.86, 5.60},
		{"Intel(R) Xeon(R) CPU E5-2680 v2 @ 2.80GHz", "Ivy Bridge", 1.71, 5.56},
		{"Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz", "Sandy Bridge", 2.21, 8.63},
		{"AMD EPYC 7571", "EPYC 1st Gen", 0.85, 2.60},
		{"AMD EPYC 7R32", "EPYC 2nd Gen", 0.47, 1.69},
		{"AMD EPYC 7B12", "EPYC 2nd Gen", 0.47, 1.69},
		{"AMD EPYC 9R14 Processor", "EPYC 4th Gen", 0.74, 2.28},
		{"ARM implementer 0x41 part 0xd0c", "Graviton2", 0.47, 1.69},
		{"ARM implementer 0x41 part 0xd40", "Graviton3", 0.47, 1.69},
		// Unrecognised or masked models get the average row.
		{"AMD EPYC 9R45", "average", 0.74, 3.5}, // Turin: row left out, see coefficients.json notes
		{"Intel(R) Xeon(R) CPU @ 2.20GHz", "average", 0.74, 3.5},
		{"AMD EPYC", "average", 0.74, 3.5},
		{"QEMU Virtual CPU version 2.5+", "average", 0.74, 3.5},
		{"", "average", 0.74, 3.5},
	}
	for _, tc := range tests {
		c := LookupCoefficients(tc.model, 16)
		if c.Arch != tc.arch || c.MinWattsPerCPU != tc.min || c.MaxWattsPerCPU != tc.max || c.CPUs != 16 {
			t.Errorf("LookupCoefficients(%q) = %s %v/%v x%d, want %s %v/%v x16",
				tc.model, c.Arch, c.MinWattsPerCPU, c.MaxWattsPerCPU, c.CPUs, tc.arch, tc.min, tc.max)
		}
		if c.Source == "" {
			t.Errorf("LookupCoefficients(%q): empty Source", tc.model)
		}
		if _, err := NewEstimator(c); err != nil {
			t.Errorf("LookupCoefficients(%q) not usable: %v", tc.model, err)
		}
	}
}

// No sample model may match two rows: first-match-wins would otherwise
// hide a pattern collision introduced by a table edit.
func TestCoefficientPatternsDoNotOverlap(t *testing.T) {
	table, err := loadCoefficientTable()
	if err != nil {
		t.Fatal(err)
	}
	models := []string{
		"Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz",
		"Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "Intel(R) Xeon(R) Platinum 8488C",
		"Intel(R) Xeon(R) Platinum 8559C", "Intel(R) Xeon(R) 6975P-C", "Intel(R) Xeon(R) E-2278G CPU @ 3.40GHz",
		"Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", "Intel(R) Xeon(R) CPU E5-2676 v3 @ 2.40GHz",
		"Intel(R) Xeon(R) CPU E5-2680 v2 @ 2.80GHz", "Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz",
		"AMD EPYC 7571", "AMD EPYC 7R32", "AMD EPYC 7B13 64-Core Processor", "AMD EPYC 9R14 Processor",
		"Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz", "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz",
		"Intel(R) Xeon(R) Gold 5412U", "ARM implementer 0x41 part 0xd4f",
	}
	for _, m := range models {
		var hits []string
		for _, r := range table.Architectures {
			if matchesAny(m, r.Match) {
				hits = append(hits, r.Arch)
			}
		}
		if len(hits) != 1 {
			t.Errorf("%q matches %d rows %v, want exactly 1", m, len(hits), hits)
		}
	}
}

func TestContainsPattern(t *testing.T) {
	tests := []struct {
		s, pat string
		want   bool
	}{
		{"AMD EPYC 7B13 64-Core", "EPYC 7??3", true},
		{"AMD EPYC 7B12", "EPYC 7??3", false},
		{"amd epyc 7r13", "EPYC 7??3", true},
		{"EPYC 7", "EPYC 7??3", false}, // pattern longer than the rest
		{"anything", "", false},
		{"E5-2686 v4 @", "E5-???? v4", true},
	}
	for _, tc := range tests {
		if got := containsPattern(tc.s, tc.pat); got != tc.want {
			t.Errorf("containsPattern(%q, %q) = %v, want %v", tc.s, tc.pat, got, tc.want)
		}
	}
}
