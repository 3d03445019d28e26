package carbon

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// DefaultElectricityMapsURL is the API v3 endpoint for the latest carbon
// intensity of a zone (https://docs.electricitymaps.com/, "Carbon
// intensity – latest"). The token goes in the `auth-token` header.
const DefaultElectricityMapsURL = "https://api.electricitymap.org/v3/carbon-intensity/latest"

// ElectricityMaps reads a zone's latest carbon intensity (lifecycle,
// consumption-based average, hourly) from Electricity Maps.
//
// The answer's shape, from the API v3 reference:
//
//	{"zone": "DE", "carbonIntensity": 302, "datetime": "2024-05-14T08:00:00.000Z",
//	 "updatedAt": "2024-05-14T08:47:14.120Z", "createdAt": "2024-05-11T08:50:06.102Z",
//	 "emissionFactorType": "lifecycle", "isEstimated": true, "estimationMethod": "TIME_SLICER_AVERAGE"}
//
// carbonIntensity is in gCO2eq/kWh; datetime is the start of the hour it
// describes. A bad token gets 401.
type ElectricityMaps struct {
	URL      string
	ZoneName string
	// Token is the API token; it is sent only in the auth-token header
	// and redacted from every error.
	Token  string
	Client *http.Client
}

// Name implements Fetcher.
func (e *ElectricityMaps) Name() string { return "electricitymaps" }

// Zone implements Fetcher.
func (e *ElectricityMaps) Zone() string { return e.ZoneName }

type emLatest struct {
	Zone            string   `json:"zone"`
	CarbonIntensity *float64 `json:"carbonIntensity"`
	Datetime        string   `json:"datetime"`
}

// Fetch implements Fetcher.
func (e *ElectricityMaps) Fetch(ctx context.Context) (Sample, error) {
	u := e.URL
	if u == "" {
		u = DefaultElectricityMapsURL
	}
	q := url.Values{}
	q.Set("zone", e.ZoneName)
	hdr := http.Header{}
	hdr.Set("auth-token", e.Token)
	var out emLatest
	if err := getJSON(ctx, client(e.Client), u+"?"+q.Encode(), hdr, "", "", &out, e.Token); err != nil {
		return Sample{}, err
	}
	if out.CarbonIntensity == nil {
		return Sample{}, unreadable("electricitymaps %s: no carbonIntensity", e.ZoneName)
	}
	s := Sample{GramsPerKWh: *out.CarbonIntensity}
	if out.Datetime != "" {
		at, err := time.Parse(time.RFC3339, out.Datetime)
		if err != nil {
			return Sample{}, unreadable("electricitymaps %s: datetime %q: %v", e.ZoneName, out.Datetime, err)
		}
		s.At = at
	}
	return s, nil
}
