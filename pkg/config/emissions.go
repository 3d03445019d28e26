package config

import (
	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/pkg/carbon"
)

// The emissions.* keys: the carbon-intensity providers (pkg/carbon) and
// whether energy is priced in grams of CO2e at all.
const (
	KeyEmissionsEnabled      = "emissions.enabled"
	KeyEmissionsProvider     = "emissions.provider"
	KeyEmissionsFallback     = "emissions.fallback"
	KeyEmissionsStaleness    = "emissions.staleness"
	KeyEmissionsConstant     = "emissions.constant.grams-per-kwh"
	KeyEmissionsCountry      = "emissions.static.country"
	KeyEmissionsRTEURL       = "emissions.rte.url"
	KeyEmissionsRTERefresh   = "emissions.rte.refresh"
	KeyEmissionsRTETimeout   = "emissions.rte.timeout"
	KeyEmissionsEMZone       = "emissions.electricitymaps.zone"
	KeyEmissionsEMTokenFile  = "emissions.electricitymaps.token-file"
	KeyEmissionsEMTokenEnv   = "emissions.electricitymaps.token-env"
	KeyEmissionsEMURL        = "emissions.electricitymaps.url"
	KeyEmissionsEMRefresh    = "emissions.electricitymaps.refresh"
	KeyEmissionsEMTimeout    = "emissions.electricitymaps.timeout"
	KeyEmissionsWTRegion     = "emissions.watttime.region"
	KeyEmissionsWTUsername   = "emissions.watttime.username"
	KeyEmissionsWTPassword   = "emissions.watttime.password-file"
	KeyEmissionsWTURL        = "emissions.watttime.url"
	KeyEmissionsWTRefresh    = "emissions.watttime.refresh"
	KeyEmissionsWTTimeout    = "emissions.watttime.timeout"
	emissionsProvidersHelpEx = "constant, static, rte, electricitymaps, watttime"
)

// Emissions configures the pricing of energy in grams of CO2e. Carbon is
// pkg/carbon's own section, so its Validate and New read it unchanged.
type Emissions struct {
	Enabled bool
	Carbon  carbon.Config
}

func emissionsFlags(fs *pflag.FlagSet) {
	def := carbon.DefaultConfig()
	fs.Bool(KeyEmissionsEnabled, true, "Price every interval's energy in grams of CO2e at the carbon intensity in force (wattrace_*_emissions_grams_total) and export the factors.")
	fs.String(KeyEmissionsProvider, def.Provider, "Carbon-intensity provider that drives the integration: "+emissionsProvidersHelpEx+" (docs/emissions.md).")
	fs.StringSlice(KeyEmissionsFallback, nil, "Providers tried in order when the driving one has no value or is older than emissions.staleness. Empty: constant, unless the provider is constant.")
	fs.Duration(KeyEmissionsStaleness, def.Staleness, "Age beyond which a provider's factor is passed over for the next fallback; 0 never falls back for age.")
	fs.Float64(KeyEmissionsConstant, def.Constant.GramsPerKWh, "The constant provider's factor in gCO2e/kWh; the default is the 2022 world average of generation (Ember).")
	fs.String(KeyEmissionsCountry, "", "The static provider's country, ISO 3166-1 alpha-2 or alpha-3 (FR, FRA): its yearly average from the embedded OWID table.")
	fs.String(KeyEmissionsRTEURL, def.RTE.URL, "RTE eco2mix real-time records endpoint (France, public).")
	fs.Duration(KeyEmissionsRTERefresh, def.RTE.Refresh, "How often RTE is read in the background.")
	fs.Duration(KeyEmissionsRTETimeout, def.RTE.Timeout, "Longest wait for one RTE read; a failed read keeps the last value, visibly stale.")
	fs.String(KeyEmissionsEMZone, "", "Electricity Maps zone, e.g. DE or US-CAL-CISO.")
	fs.String(KeyEmissionsEMTokenFile, "", "File holding the Electricity Maps API token (preferred; never logged).")
	fs.String(KeyEmissionsEMTokenEnv, def.ElectricityMaps.TokenEnv, "Environment variable holding the Electricity Maps API token when no token file is set.")
	fs.String(KeyEmissionsEMURL, def.ElectricityMaps.URL, "Electricity Maps carbon-intensity/latest endpoint.")
	fs.Duration(KeyEmissionsEMRefresh, def.ElectricityMaps.Refresh, "How often Electricity Maps is read in the background.")
	fs.Duration(KeyEmissionsEMTimeout, def.ElectricityMaps.Timeout, "Longest wait for one Electricity Maps read.")
	fs.String(KeyEmissionsWTRegion, "", "WattTime region, e.g. CAISO_NORTH.")
	fs.String(KeyEmissionsWTUsername, "", "WattTime user name.")
	fs.String(KeyEmissionsWTPassword, "", "File holding the WattTime password (never logged).")
	fs.String(KeyEmissionsWTURL, def.WattTime.URL, "WattTime API base URL.")
	fs.Duration(KeyEmissionsWTRefresh, def.WattTime.Refresh, "How often WattTime is read in the background.")
	fs.Duration(KeyEmissionsWTTimeout, def.WattTime.Timeout, "Longest wait for one WattTime read.")
}

func decodeEmissions(d *decoder) Emissions {
	e := Emissions{Enabled: d.Bool(KeyEmissionsEnabled)}
	c := &e.Carbon
	c.Provider = d.String(KeyEmissionsProvider)
	c.Fallback = d.Strings(KeyEmissionsFallback)
	c.Staleness = d.Duration(KeyEmissionsStaleness)
	c.Constant.GramsPerKWh = d.Float(KeyEmissionsConstant)
	c.Static.Country = d.String(KeyEmissionsCountry)
	c.RTE.URL, c.RTE.Refresh, c.RTE.Timeout = d.String(KeyEmissionsRTEURL), d.Duration(KeyEmissionsRTERefresh), d.Duration(KeyEmissionsRTETimeout)
	em := &c.ElectricityMaps
	em.Zone, em.TokenFile, em.TokenEnv = d.String(KeyEmissionsEMZone), d.String(KeyEmissionsEMTokenFile), d.String(KeyEmissionsEMTokenEnv)
	em.URL, em.Refresh, em.Timeout = d.String(KeyEmissionsEMURL), d.Duration(KeyEmissionsEMRefresh), d.Duration(KeyEmissionsEMTimeout)
	wt := &c.WattTime
	wt.Region, wt.Username, wt.PasswordFile = d.String(KeyEmissionsWTRegion), d.String(KeyEmissionsWTUsername), d.String(KeyEmissionsWTPassword)
	wt.URL, wt.Refresh, wt.Timeout = d.String(KeyEmissionsWTURL), d.Duration(KeyEmissionsWTRefresh), d.Duration(KeyEmissionsWTTimeout)
	return e
}

// validate checks the section when it is on; pkg/carbon's errors name
// their key (emissions.static.country for an unknown country). An unused
// provider's settings never stop start-up.
func (e Emissions) validate() error {
	if !e.Enabled {
		return nil
	}
	return e.Carbon.Validate()
}
