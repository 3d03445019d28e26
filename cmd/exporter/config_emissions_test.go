package main

import (
	"strings"
	"testing"
	"time"
)

// The emissions block reads from a nested YAML file, the environment and
// flags like every other key; the chain's defaults fill the rest.
func TestEmissionsKeys(t *testing.T) {
	f := writeFile(t, "emissions:\n  provider: static\n  fallback: [constant]\n  staleness: 30m\n  static:\n    country: fra\n  constant:\n    grams-per-kwh: 300\n")
	t.Setenv("WATTRACE_EMISSIONS_RTE_TIMEOUT", "3s")
	c, err := Load([]string{"--config.file=" + f, "--emissions.electricitymaps.zone=DE"})
	if err != nil {
		t.Fatal(err)
	}
	e := c.Emissions
	if !e.Enabled || e.Carbon.Provider != "static" || len(e.Carbon.Fallback) != 1 || e.Carbon.Fallback[0] != "constant" ||
		e.Carbon.Staleness != 30*time.Minute || e.Carbon.Static.Country != "fra" || e.Carbon.Constant.GramsPerKWh != 300 ||
		e.Carbon.RTE.Timeout != 3*time.Second || e.Carbon.ElectricityMaps.Zone != "DE" || e.Carbon.RTE.Refresh != 5*time.Minute {
		t.Errorf("emissions: %+v", e)
	}
}

// Bad emissions settings stop start-up with an error naming the key; a
// provider outside the chain is not checked, and emissions.enabled=false
// checks nothing.
func TestEmissionsErrorsNameTheKey(t *testing.T) {
	for _, tt := range []struct {
		args []string
		key  string
	}{
		{[]string{"--emissions.provider=static", "--emissions.static.country=ZZ"}, "emissions.static.country"},
		{[]string{"--emissions.provider=static"}, "emissions.static.country"},
		{[]string{"--emissions.provider=coal"}, "emissions.provider"},
		{[]string{"--emissions.fallback=static,nope", "--emissions.provider=rte", "--emissions.static.country=FR"}, "emissions.fallback"},
		{[]string{"--emissions.constant.grams-per-kwh=2500"}, "emissions.constant.grams-per-kwh"},
		{[]string{"--emissions.constant.grams-per-kwh=-1"}, "emissions.constant.grams-per-kwh"},
		{[]string{"--emissions.staleness=-1s"}, "emissions.staleness"},
		{[]string{"--emissions.provider=rte", "--emissions.rte.url=ftp://x"}, "emissions.rte.url"},
		{[]string{"--emissions.provider=electricitymaps"}, "emissions.electricitymaps.zone"},
		{[]string{"--emissions.provider=watttime", "--emissions.watttime.region=CAISO_NORTH"}, "emissions.watttime.username"},
	} {
		_, err := Load(tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("%v: error %v, want one naming %s", tt.args, err, tt.key)
		}
	}
	for _, ok := range [][]string{
		{"--emissions.static.country=ZZ"}, // static not in the chain
		{"--emissions.enabled=false", "--emissions.provider=coal"},
		{"--emissions.provider=static", "--emissions.static.country=NO"},
	} {
		if _, err := Load(ok); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
}
