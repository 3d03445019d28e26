package dashlint

import "strings"

// units are Grafana's unit ids (its value formats) that power, energy,
// time, data, rate and count panels use. It is not every unit Grafana has:
// a dashboard that needs another adds it here, after checking the id in
// Grafana's unit picker.
var units = map[string]bool{}

func init() {
	for _, group := range []string{
		// Plain numbers, ratios, text.
		"none short percent percentunit string locale sci hex hex0x dB humidity ppm",
		// Power and energy.
		"watt kwatt megwatt gwatt mwatt Wm2 voltamp kvoltamp voltampreact kvoltampreact watth kwatth kwattm joule ev amp kamp mamp volt kvolt mvolt dBm ohm kohm Mohm",
		// Mass (grams of CO2e).
		"massmg massg masslb masskg masst",
		// Temperature.
		"celsius fahrenheit kelvin",
		// Time and frequency.
		"hertz ns µs ms s m h d dtdurationms dtdurations dthms dtdhms timeticks clockms clocks",
		// Dates.
		"dateTimeAsIso dateTimeAsIsoNoDateIfToday dateTimeAsUS dateTimeAsUSNoDateIfToday dateTimeAsLocal dateTimeAsLocalNoDateIfToday dateTimeAsSystem dateTimeFromNow",
		// Data.
		"bytes decbytes bits decbits kbytes deckbytes mbytes decmbytes gbytes decgbytes tbytes dectbytes pbytes decpbytes",
		// Data rates.
		"pps binBps Bps binbps bps KiBs Kibits KBs Kbits MiBs Mibits MBs Mbits GiBs Gibits GBs Gbits TiBs Tibits TBs Tbits",
		// Throughput.
		"cps ops reqps rps wps iops cpm opm rpm wpm",
		// Booleans.
		"bool bool_yes_no bool_on_off",
	} {
		for _, u := range strings.Fields(group) {
			units[u] = true
		}
	}
}

// customUnits are the prefixes of Grafana's custom units (suffix:J).
var customUnits = []string{"suffix:", "prefix:", "si:", "count:", "currency:", "time:"}

// validUnit reports whether Grafana knows unit u.
func validUnit(u string) bool {
	if units[u] {
		return true
	}
	for _, c := range customUnits {
		if strings.HasPrefix(u, c) && len(u) > len(c) {
			return true
		}
	}
	return false
}
