package power

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
)

// coefficientsJSON is the per-microarchitecture table (see the file's own
// "source" and "notes" for provenance). It is read-only; every lookup
// parses it afresh, which costs microseconds and happens once at start-up.
//
//go:embed coefficients.json
var coefficientsJSON []byte

type coefficientRow struct {
	Arch   string   `json:"arch"`
	Match  []string `json:"match"`
	MinW   float64  `json:"min_watts_per_vcpu"`
	MaxW   float64  `json:"max_watts_per_vcpu"`
	Source string   `json:"source"`
}

type coefficientTable struct {
	Source        string           `json:"source"`
	Notes         []string         `json:"notes"`
	Average       coefficientRow   `json:"average"`
	Architectures []coefficientRow `json:"architectures"`
}

// loadCoefficientTable parses and sanity-checks the embedded table.
func loadCoefficientTable() (coefficientTable, error) {
	var t coefficientTable
	if err := json.Unmarshal(coefficientsJSON, &t); err != nil {
		return t, fmt.Errorf("parse embedded coefficients.json: %w", err)
	}
	rows := append([]coefficientRow{t.Average}, t.Architectures...)
	for _, r := range rows {
		c := Coefficients{MinWattsPerCPU: r.MinW, MaxWattsPerCPU: r.MaxW, CPUs: 1, Arch: r.Arch, Source: r.Source}
		if err := c.validate(); err != nil {
			return t, fmt.Errorf("embedded coefficients.json: row %q: %w", r.Arch, err)
		}
		if r.Source == "" {
			return t, fmt.Errorf("embedded coefficients.json: row %q has no source", r.Arch)
		}
	}
	return t, nil
}

// LookupCoefficients picks the estimator coefficients for a CPU model
// string (as returned by CPUModel) and CPU count. The first table row with
// a matching pattern wins; an unrecognised or empty model gets the average
// row, so the result is always usable (Arch tells the caller which row).
func LookupCoefficients(cpuModel string, cpus int) Coefficients {
	t, err := loadCoefficientTable()
	if err != nil {
		// The table is compiled in and checked by the package tests, so
		// this is a build defect, not a runtime condition.
		panic(err)
	}
	row := t.Average
	for _, r := range t.Architectures {
		if matchesAny(cpuModel, r.Match) {
			row = r
			break
		}
	}
	return Coefficients{
		MinWattsPerCPU: row.MinW,
		MaxWattsPerCPU: row.MaxW,
		CPUs:           cpus,
		Source:         row.Source,
		Arch:           row.Arch,
	}
}

func matchesAny(model string, patterns []string) bool {
	for _, p := range patterns {
		if containsPattern(model, p) {
			return true
		}
	}
	return false
}

// containsPattern reports whether s contains pat, ignoring ASCII case,
// where '?' in pat matches any single byte. It is deliberately smaller than
// a regexp: the table is data that non-Go people edit.
func containsPattern(s, pat string) bool {
	if pat == "" {
		return false
	}
	s, pat = strings.ToLower(s), strings.ToLower(pat)
	for i := 0; i+len(pat) <= len(s); i++ {
		ok := true
		for j := 0; j < len(pat); j++ {
			if pat[j] != '?' && pat[j] != s[i+j] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
