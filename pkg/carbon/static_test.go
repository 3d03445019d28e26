package carbon

import (
	"context"
	"strings"
	"testing"
)

// Values as published in the source (OWID via CodeCarbon's
// global_energy_mix.json, year 2021): see data/SOURCE.md.
func TestStaticKnownCountries(t *testing.T) {
	for _, c := range []struct {
		code, zone string
		g          float64
	}{
		{"FR", "FR", 67.39}, {"FRA", "FR", 67.39}, {"fra", "FR", 67.39},
		{"DE", "DE", 365.477}, {"PL", "PL", 660.122}, {"SE", "SE", 45.817},
		{"USA", "US", 379.26}, {"IN", "IN", 637.182}, {"CN", "CN", 544.355},
		{"GB", "GB", 268.329}, {"NO", "NO", 27.55}, {"ZA", "ZA", 715.681},
	} {
		s, err := NewStatic(c.code)
		if err != nil {
			t.Fatalf("%s: %v", c.code, err)
		}
		v, _ := s.Fetch(context.Background())
		if v.GramsPerKWh != c.g || s.Zone() != c.zone || s.Country.Year != 2021 {
			t.Errorf("%s: %g g/kWh zone %s year %d, want %g %s 2021", c.code, v.GramsPerKWh, s.Zone(), s.Country.Year, c.g, c.zone)
		}
	}
}

func TestStaticUnknownCountry(t *testing.T) {
	for _, code := range []string{"XX", "ZZZ", "", "France", "UK"} {
		_, err := NewStatic(code)
		if err == nil || !strings.Contains(err.Error(), "emissions.static.country") {
			t.Errorf("%q: %v", code, err)
		}
	}
}

// Every line of the table parses, is a plausible intensity, and the two
// codes are unique: a bad refresh of the data fails here, not at start-up.
func TestStaticTableSane(t *testing.T) {
	all, err := Countries()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 205 {
		t.Fatalf("%d countries", len(all))
	}
	a2 := map[string]string{}
	for a3, c := range all {
		if len(a3) != 3 || len(c.Alpha2) != 2 || c.GramsPerKWh < 0 || c.GramsPerKWh > MaxGramsPerKWh || c.Year < 2015 {
			t.Errorf("%+v", c)
		}
		if prev, dup := a2[c.Alpha2]; dup {
			t.Errorf("alpha-2 %s for %s and %s", c.Alpha2, prev, a3)
		}
		a2[c.Alpha2] = a3
	}
}
