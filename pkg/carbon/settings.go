package carbon

import (
	"strings"

	"github.com/wattrace/wattrace/internal/setting"
)

// Settings are the emissions.* settings: whether energy is priced in
// grams of CO2e at all, and the providers' Config.
type Settings struct {
	Enabled bool
	Carbon  Config
}

// Declare declares the emissions.* settings bound to e, with
// DefaultConfig's defaults. They are checked together, by Config.Validate,
// and only when emissions are on: an unused provider's settings never stop
// start-up.
func (e *Settings) Declare(s *setting.Set) {
	def, c := DefaultConfig(), &e.Carbon
	s.Bool(&e.Enabled, "emissions.enabled", true, "Price every interval's energy in grams of CO2e at the carbon intensity in force (wattrace_*_emissions_grams_total) and export the factors.").Checked(func() error {
		if !e.Enabled {
			return nil
		}
		return c.Validate()
	})
	s.String(&c.Provider, "emissions.provider", def.Provider, "Carbon-intensity provider that drives the integration: "+strings.Join(knownProviders, ", ")+" (docs/emissions.md).")
	s.Strings(&c.Fallback, "emissions.fallback", nil, "Providers tried in order when the driving one has no value or is older than emissions.staleness. Empty: constant, unless the provider is constant.")
	s.AnyDuration(&c.Staleness, "emissions.staleness", def.Staleness, "Age beyond which a provider's factor is passed over for the next fallback; 0 never falls back for age.")
	s.Float(&c.Constant.GramsPerKWh, "emissions.constant.grams-per-kwh", def.Constant.GramsPerKWh, "The constant provider's factor in gCO2e/kWh; the default is the 2022 world average of generation (Ember).")
	s.String(&c.Static.Country, "emissions.static.country", "", "The static provider's country, ISO 3166-1 alpha-2 or alpha-3 (FR, FRA): its yearly average from the embedded OWID table.")
	s.String(&c.RTE.URL, "emissions.rte.url", def.RTE.URL, "RTE eco2mix real-time records endpoint (France, public).")
	s.AnyDuration(&c.RTE.Refresh, "emissions.rte.refresh", def.RTE.Refresh, "How often RTE is read in the background.")
	s.AnyDuration(&c.RTE.Timeout, "emissions.rte.timeout", def.RTE.Timeout, "Longest wait for one RTE read; a failed read keeps the last value, visibly stale.")
	em := &c.ElectricityMaps
	s.String(&em.Zone, "emissions.electricitymaps.zone", "", "Electricity Maps zone, e.g. DE or US-CAL-CISO.")
	s.String(&em.TokenFile, "emissions.electricitymaps.token-file", "", "File holding the Electricity Maps API token (preferred; never logged).")
	s.String(&em.TokenEnv, "emissions.electricitymaps.token-env", def.ElectricityMaps.TokenEnv, "Environment variable holding the Electricity Maps API token when no token file is set.")
	s.String(&em.URL, "emissions.electricitymaps.url", def.ElectricityMaps.URL, "Electricity Maps carbon-intensity/latest endpoint.")
	s.AnyDuration(&em.Refresh, "emissions.electricitymaps.refresh", def.ElectricityMaps.Refresh, "How often Electricity Maps is read in the background.")
	s.AnyDuration(&em.Timeout, "emissions.electricitymaps.timeout", def.ElectricityMaps.Timeout, "Longest wait for one Electricity Maps read.")
	wt := &c.WattTime
	s.String(&wt.Region, "emissions.watttime.region", "", "WattTime region, e.g. CAISO_NORTH.")
	s.String(&wt.Username, "emissions.watttime.username", "", "WattTime user name.")
	s.String(&wt.PasswordFile, "emissions.watttime.password-file", "", "File holding the WattTime password (never logged).")
	s.String(&wt.URL, "emissions.watttime.url", def.WattTime.URL, "WattTime API base URL.")
	s.AnyDuration(&wt.Refresh, "emissions.watttime.refresh", def.WattTime.Refresh, "How often WattTime is read in the background.")
	s.AnyDuration(&wt.Timeout, "emissions.watttime.timeout", def.WattTime.Timeout, "Longest wait for one WattTime read.")
}
