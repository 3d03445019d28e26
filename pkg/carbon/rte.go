package carbon

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// DefaultRTEURL is the records endpoint of ODRÉ's Opendatasoft Explore API
// v2.1 for RTE's real-time eco2mix dataset (public, no token):
// https://odre.opendatasoft.com/explore/dataset/eco2mix-national-tr/api/
const DefaultRTEURL = "https://odre.opendatasoft.com/api/explore/v2.1/catalog/datasets/eco2mix-national-tr/records"

// RTE reads France's real-time carbon intensity from eco2mix: the latest
// quarter-hour whose taux_co2 is filled in (the newest rows carry
// consumption forecasts before the production mix, and so taux_co2, is
// known).
//
// The answer's shape is the Explore API v2.1 records response (Opendatasoft's
// published OpenAPI: `total_count`, `results`, each record's fields as
// properties):
//
//	{"total_count": 35040, "results": [{"date_heure": "2024-05-14T08:45:00+00:00", "taux_co2": 21}]}
//
// taux_co2 is in gCO2/kWh; date_heure is the start of the quarter hour.
type RTE struct {
	URL    string
	Client *http.Client
}

// Name implements Fetcher.
func (r *RTE) Name() string { return "rte" }

// Zone implements Fetcher.
func (r *RTE) Zone() string { return "FR" }

type rteRecords struct {
	TotalCount int `json:"total_count"`
	Results    []struct {
		DateHeure string   `json:"date_heure"`
		TauxCO2   *float64 `json:"taux_co2"`
	} `json:"results"`
}

// Fetch implements Fetcher.
func (r *RTE) Fetch(ctx context.Context) (Sample, error) {
	u := r.URL
	if u == "" {
		u = DefaultRTEURL
	}
	q := url.Values{}
	q.Set("select", "date_heure,taux_co2")
	q.Set("where", "taux_co2 is not null")
	q.Set("order_by", "date_heure desc")
	q.Set("limit", "1")
	var out rteRecords
	if err := getJSON(ctx, client(r.Client), u+"?"+q.Encode(), nil, "", "", &out); err != nil {
		return Sample{}, err
	}
	if len(out.Results) == 0 || out.Results[0].TauxCO2 == nil {
		return Sample{}, unreadable("rte: no record with taux_co2")
	}
	rec := out.Results[0]
	at, err := time.Parse(time.RFC3339, rec.DateHeure)
	if err != nil {
		return Sample{}, unreadable("rte: date_heure %q: %v", rec.DateHeure, err)
	}
	return Sample{GramsPerKWh: *rec.TauxCO2, At: at}, nil
}

// client is c, or a client of our own: never http.DefaultClient, whose
// settings any package may change.
func client(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	return &http.Client{}
}
