package cpulist

import (
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	limit := make([]int, MaxLen)
	for i := range limit {
		limit[i] = i
	}
	good := []struct {
		in   string
		want []int
	}{
		{"0-3,5,7-8\n", []int{0, 1, 2, 3, 5, 7, 8}},
		{"0", []int{0}},
		{"", nil},
		{"\n", nil},
		{"4-4", []int{4}},
		{"2,0-1,1", []int{0, 1, 2}}, // never written by the kernel, but harmless
		{"0-65535", limit},          // exactly MaxLen
	}
	for _, tc := range good {
		got, err := Parse(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %d CPUs %v; want %d CPUs", tc.in, len(got), err, len(tc.want))
		}
	}
	for _, in := range []string{"a", "1-", "-1", "3-1", "1,,2", ",", "1-2-3", "+1", "0-65536", "0-4294967295", "0-99999999999999999999"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want error", in, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0-3,5,7-8", "0", "", "3-1", "0-4294967295", "1,,2", "0-1,1-2\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := Parse(s)
		if err != nil {
			return
		}
		if len(cpus) > MaxLen {
			t.Fatalf("%d CPUs exceeds limit", len(cpus))
		}
		if !sort.IntsAreSorted(cpus) {
			t.Fatalf("not sorted: %v", cpus)
		}
		for i := 1; i < len(cpus); i++ {
			if cpus[i] == cpus[i-1] {
				t.Fatalf("duplicate %d", cpus[i])
			}
		}
		// Re-encoding as single CPUs must parse back to the same set.
		parts := make([]string, len(cpus))
		for i, c := range cpus {
			parts[i] = strconv.Itoa(c)
		}
		again, err := Parse(strings.Join(parts, ","))
		if err != nil || !reflect.DeepEqual(again, cpus) {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
	})
}
