// Package cpulist parses the kernel's CPU list format ("0-3,5,7-8"), as
// in /sys/devices/system/cpu/online and the perf PMUs' cpumask files.
package cpulist

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/wattrace/wattrace/internal/decimal"
)

// MaxLen bounds how many CPUs a cpu list may expand to. Linux caps
// NR_CPUS at 8192 today; the headroom is generous, the bound exists so a
// corrupt or hostile "0-4294967295" cannot make us allocate gigabytes.
const MaxLen = 1 << 16

// Parse parses the kernel's cpu list format ("0-3,5,7-8", as in
// devices/system/cpu/online) into a sorted list of distinct CPU numbers.
// Surrounding whitespace (the trailing newline) is ignored; an empty list
// is valid and yields no CPUs.
func Parse(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	seen := make(map[int]struct{})
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := parseNumber(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", truncate(s), err)
		}
		last := first
		if isRange {
			if last, err = parseNumber(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", truncate(s), err)
			}
			if last < first {
				return nil, fmt.Errorf("cpu list %q: descending range %q", truncate(s), part)
			}
		}
		if last-first >= MaxLen || len(seen)+(last-first+1) > MaxLen {
			return nil, fmt.Errorf("cpu list %q: more than %d CPUs", truncate(s), MaxLen)
		}
		for c := first; c <= last; c++ {
			seen[c] = struct{}{}
		}
	}
	cpus := make([]int, 0, len(seen))
	for c := range seen {
		cpus = append(cpus, c)
	}
	sort.Ints(cpus)
	return cpus, nil
}

// parseNumber accepts plain non-negative decimal only: strconv.Atoi
// would also take "+3", which the kernel never writes.
func parseNumber(s string) (int, error) {
	n, ok := decimal.Parse(s)
	if !ok || n > math.MaxInt32 {
		return 0, fmt.Errorf("invalid cpu number %q", s)
	}
	return int(n), nil
}

// truncate keeps error messages readable when a file holds garbage.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
