package carbon

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

// intensityCSV is the per-country table; data/SOURCE.md says where it comes
// from and under which licence.
//
//go:embed data/intensity.csv
var intensityCSV []byte

// Country is one line of the embedded table.
type Country struct {
	Alpha3, Alpha2 string
	Name           string
	GramsPerKWh    float64
	Year           int
}

// Countries parses the embedded table, keyed by alpha-3.
func Countries() (map[string]Country, error) {
	out := map[string]Country{}
	sc := bufio.NewScanner(bytes.NewReader(intensityCSV))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, ",", 5)
		if len(f) != 5 {
			return nil, fmt.Errorf("intensity.csv line %d: %d fields", n, len(f))
		}
		g, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, fmt.Errorf("intensity.csv line %d: %w", n, err)
		}
		y, err := strconv.Atoi(f[3])
		if err != nil {
			return nil, fmt.Errorf("intensity.csv line %d: %w", n, err)
		}
		out[f[0]] = Country{Alpha3: f[0], Alpha2: f[1], GramsPerKWh: g, Year: y, Name: f[4]}
	}
	return out, sc.Err()
}

// Static is a country's yearly average from the embedded table.
type Static struct {
	Country Country
}

// NewStatic looks code up: ISO 3166-1 alpha-2 ("FR") or alpha-3 ("FRA"),
// any case. An unknown code is an error naming the configuration key.
func NewStatic(code string) (*Static, error) {
	all, err := Countries()
	if err != nil {
		return nil, err
	}
	c := strings.ToUpper(strings.TrimSpace(code))
	if len(c) == 2 {
		for _, e := range all {
			if e.Alpha2 == c {
				return &Static{Country: e}, nil
			}
		}
	} else if e, ok := all[c]; ok {
		return &Static{Country: e}, nil
	}
	return nil, fmt.Errorf("emissions.static.country: unknown or uncovered country code %q (ISO 3166-1 alpha-2 or alpha-3, e.g. FR or FRA; the table covers %d countries, see pkg/carbon/data/intensity.csv)", code, len(all))
}

// Name implements Fetcher.
func (s *Static) Name() string { return "static" }

// Zone implements Fetcher: the country's alpha-2 code, as Electricity
// Maps names most national zones.
func (s *Static) Zone() string { return s.Country.Alpha2 }

// Fetch implements Fetcher.
func (s *Static) Fetch(context.Context) (Sample, error) {
	return Sample{GramsPerKWh: s.Country.GramsPerKWh}, nil
}

func (*Static) fixed() {}
