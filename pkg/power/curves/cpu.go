package curves

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
)

// Normalize reduces a CPU model string, as /proc/cpuinfo or a SPECpower
// result spells it, to the key the tables are indexed by: lower case,
// without trademarks, vendor, "CPU"/"Processor", core counts, clock
// speeds, parenthesised or comma-separated remarks, with a generation
// suffix set apart ("e5-2660v2" → "e5-2660 v2"). Both
// "Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz" and
// "Intel Xeon Platinum 8180 2.50 GHz" become "xeon platinum 8180".
func Normalize(model string) string {
	s := strings.ToLower(model)
	for _, tm := range []string{"(r)", "(tm)", "(c)"} {
		s = strings.ReplaceAll(s, tm, " ")
	}
	if i := strings.IndexAny(s, "@,"); i >= 0 {
		s = s[:i]
	}
	s = parens.ReplaceAllString(s, " ")
	var out []string
	for _, tok := range strings.Fields(s) {
		switch {
		case dropWords[tok], coreCount.MatchString(tok), clock.MatchString(tok), tok == "0":
			continue
		case (tok == "ghz" || tok == "mhz") && len(out) > 0 && number.MatchString(out[len(out)-1]):
			out = out[:len(out)-1]
			continue
		case len(out) > 0 && (tok == "he" || tok == "ee" || tok == "se") && number.MatchString(out[len(out)-1]):
			out[len(out)-1] += tok
			continue
		case version.MatchString(tok) && len(out) > 0:
			out[len(out)-1] += " " + tok
			continue
		}
		if m := attachedVersion.FindStringSubmatch(tok); m != nil {
			out = append(out, m[1], "v"+m[2])
			continue
		}
		out = append(out, tok)
	}
	// A clock speed at the start ("2.6 GHz AMD Opteron 2435") was removed
	// with its unit; a bare number left in front of the family name is
	// a clock too.
	for len(out) > 1 && number.MatchString(out[0]) && strings.Contains(out[0], ".") {
		out = out[1:]
	}
	return strings.Join(out, " ")
}

var (
	parens          = regexp.MustCompile(`\([^)]*\)?|\[[^\]]*\]?`)
	coreCount       = regexp.MustCompile(`^\d+-core$`)
	clock           = regexp.MustCompile(`^\d+(\.\d+)?(ghz|mhz)$`)
	number          = regexp.MustCompile(`^\d+(\.\d+)?$`)
	version         = regexp.MustCompile(`^v\d$`)
	attachedVersion = regexp.MustCompile(`^([a-z]\d-\d{4}[a-z]{0,2}?)v(\d)$`)
	dropWords       = map[string]bool{
		"intel": true, "amd": true, "cpu": true, "processor": true,
		"dual-core": true, "quad-core": true, "six-core": true, "eight-core": true,
		"twelve-core": true, "sixteen-core": true,
	}
)

// Arch is one row of the microarchitecture table (archs.json).
type Arch struct {
	Name string `json:"arch"`
	// Group is the row's group in the fitted whole-server curves.
	Group string   `json:"specpower"`
	Match []string `json:"match"`
	// MinW and MaxW are Cloud Carbon Footprint's watts per vCPU at 0% and
	// 100% utilisation; 0 where CCF has no row (the average is used).
	MinW   float64 `json:"min_watts_per_vcpu"`
	MaxW   float64 `json:"max_watts_per_vcpu"`
	CCFRow string  `json:"ccf_row"`

	re []*regexp.Regexp
}

type archTable struct {
	Notes   []string `json:"notes"`
	Average struct {
		MinW float64 `json:"min_watts_per_vcpu"`
		MaxW float64 `json:"max_watts_per_vcpu"`
	} `json:"average"`
	Architectures []Arch `json:"architectures"`
}

//go:embed archs.json
var archsJSON []byte

// parseArchs parses and checks an architecture table: every pattern
// compiles, every row has one, per-vCPU figures are finite, non-negative
// and do not shrink with load.
func parseArchs(b []byte) (archTable, error) {
	var t archTable
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("parse archs.json: %w", err)
	}
	if err := checkPerVCPU("average", t.Average.MinW, t.Average.MaxW); err != nil {
		return t, err
	}
	if t.Average.MaxW == 0 {
		return t, fmt.Errorf("archs.json: the average row has no figures")
	}
	for i := range t.Architectures {
		a := &t.Architectures[i]
		if a.Name == "" || a.Group == "" || len(a.Match) == 0 {
			return t, fmt.Errorf("archs.json: row %d (%q) needs arch, specpower and match", i, a.Name)
		}
		if err := checkPerVCPU(a.Name, a.MinW, a.MaxW); err != nil {
			return t, err
		}
		for _, p := range a.Match {
			re, err := regexp.Compile(p)
			if err != nil {
				return t, fmt.Errorf("archs.json: row %q: pattern %q: %w", a.Name, p, err)
			}
			a.re = append(a.re, re)
		}
	}
	return t, nil
}

// MaxWattsPerVCPU bounds per-vCPU figures: the largest server CPUs draw
// well under 20 W per hardware thread, so anything near this is a typo.
const MaxWattsPerVCPU = 1000

func checkPerVCPU(row string, lo, hi float64) error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if !finite(lo) || !finite(hi) || lo < 0 || hi < lo || hi > MaxWattsPerVCPU {
		return fmt.Errorf("archs.json: row %q: watts per vCPU min %v, max %v: want 0 <= min <= max <= %d", row, lo, hi, MaxWattsPerVCPU)
	}
	return nil
}

// lookupArch returns the first row whose pattern matches the normalised
// model key.
func (t archTable) lookupArch(key string) (Arch, bool) {
	for _, a := range t.Architectures {
		for _, re := range a.re {
			if re.MatchString(key) {
				return a, true
			}
		}
	}
	return Arch{}, false
}

// Vendor guesses the CPU vendor from a normalised key: "intel", "amd",
// "arm" or "".
func Vendor(key string) string {
	switch {
	case strings.Contains(key, "epyc"), strings.Contains(key, "opteron"), strings.Contains(key, "ryzen"):
		return "amd"
	case strings.Contains(key, "xeon"), strings.Contains(key, "core i"), strings.HasPrefix(key, "i3-"),
		strings.HasPrefix(key, "i5-"), strings.HasPrefix(key, "i7-"), strings.HasPrefix(key, "i9-"), strings.Contains(key, "pentium"):
		return "intel"
	case strings.HasPrefix(key, "arm implementer"):
		return "arm"
	}
	return ""
}

var (
	familyIntel = regexp.MustCompile(`([a-z]\d-\d\d|(?:platinum|gold|silver|bronze) \d\d|\b[xlew]\d\d|opteron \d\d)\d\d`)
	familyAMD   = regexp.MustCompile(`(epyc \d)\d\d`)
)

// Family is a normalised key's model number without the digits that rank
// it within its line ("xeon e5-2680 v3" → "xeon e5-26xx v3", "xeon gold
// 6248" → "xeon gold 62xx", "epyc 7742" → "epyc 7xx2", "opteron 6376" → "opteron 63xx"); "" when the key
// has no model number it can read. CPUs of a family share a platform,
// and so much of their power beyond what threads and memory explain.
func Family(key string) string {
	for _, re := range []*regexp.Regexp{familyIntel, familyAMD} {
		if loc := re.FindStringSubmatchIndex(key); loc != nil {
			return key[:loc[3]] + "xx" + key[loc[1]:]
		}
	}
	return ""
}
