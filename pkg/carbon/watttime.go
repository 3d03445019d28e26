package carbon

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// DefaultWattTimeURL is WattTime's API base (https://docs.watttime.org/).
const DefaultWattTimeURL = "https://api.watttime.org"

// LbPerMWhToGPerKWh converts WattTime's lb CO2/MWh to g/kWh:
// 1 lb = 453.592 g and 1 MWh = 1,000 kWh.
const LbPerMWhToGPerKWh = 0.453592

// wattTimeTokenLife is how long a login token is reused. WattTime's tokens
// expire after 30 minutes; renewing at 25 avoids a 401 in the middle.
const wattTimeTokenLife = 25 * time.Minute

// WattTime reads the marginal operating emissions rate (MOER, signal
// co2_moer) of a region from WattTime API v3.
//
// Shapes, from docs.watttime.org (OpenAPI "WattTime Data API V3"):
//
//	GET /login (HTTP basic auth)            -> {"token": "<JWT>"}
//	GET /v3/forecast?region=R&signal_type=co2_moer&horizon_hours=0
//	    (Authorization: Bearer <JWT>)       -> {"data": [{"point_time": "2024-05-14T08:45:00+00:00", "value": 870.2}],
//	                                            "meta": {"region": "CAISO_NORTH", "signal_type": "co2_moer",
//	                                                     "units": "lbs_co2_per_mwh", "generated_at": "..."}}
//
// The first point of a zero-horizon forecast is the current 5-minute
// MOER. Values are lb/MWh and are converted to g/kWh. /v3/signal-index
// gives a percentile (0-100), not an intensity, so it is not used as a
// factor. Without a subscription only CAISO_NORTH serves MOER values.
type WattTime struct {
	URL      string
	Region   string
	Username string
	Password string
	Client   *http.Client
	// Now is the clock for the token's life (default time.Now).
	Now func() time.Time

	mu      sync.Mutex
	token   string
	tokenAt time.Time
}

// Name implements Fetcher.
func (w *WattTime) Name() string { return "watttime" }

// Zone implements Fetcher.
func (w *WattTime) Zone() string { return w.Region }

type wtLogin struct {
	Token string `json:"token"`
}

type wtData struct {
	Data []struct {
		PointTime string   `json:"point_time"`
		Value     *float64 `json:"value"`
	} `json:"data"`
	Meta struct {
		Units string `json:"units"`
	} `json:"meta"`
}

func (w *WattTime) base() string {
	if w.URL == "" {
		return DefaultWattTimeURL
	}
	return strings.TrimRight(w.URL, "/")
}

func (w *WattTime) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// login returns a bearer token, logging in when none is held or it is old.
func (w *WattTime) login(ctx context.Context, force bool) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !force && w.token != "" && w.now().Sub(w.tokenAt) < wattTimeTokenLife {
		return w.token, nil
	}
	var out wtLogin
	if err := getJSON(ctx, client(w.Client), w.base()+"/login", nil, w.Username, w.Password, &out, w.token); err != nil {
		return "", err
	}
	if out.Token == "" {
		return "", unreadable("watttime: login answer has no token")
	}
	w.token, w.tokenAt = out.Token, w.now()
	return w.token, nil
}

// Fetch implements Fetcher.
func (w *WattTime) Fetch(ctx context.Context) (Sample, error) {
	s, err := w.fetch(ctx, false)
	var st *StatusError
	if errors.As(err, &st) && st.Code == http.StatusUnauthorized {
		// The token expired early or was revoked: log in again, once.
		s, err = w.fetch(ctx, true)
	}
	return s, err
}

func (w *WattTime) fetch(ctx context.Context, relogin bool) (Sample, error) {
	tok, err := w.login(ctx, relogin)
	if err != nil {
		return Sample{}, err
	}
	q := url.Values{}
	q.Set("region", w.Region)
	q.Set("signal_type", "co2_moer")
	q.Set("horizon_hours", "0")
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+tok)
	var out wtData
	if err := getJSON(ctx, client(w.Client), w.base()+"/v3/forecast?"+q.Encode(), hdr, "", "", &out, tok, w.Password); err != nil {
		return Sample{}, err
	}
	if out.Meta.Units != "lbs_co2_per_mwh" {
		return Sample{}, unreadable("watttime %s: units %q, want lbs_co2_per_mwh", w.Region, out.Meta.Units)
	}
	if len(out.Data) == 0 || out.Data[0].Value == nil {
		return Sample{}, unreadable("watttime %s: no data point", w.Region)
	}
	p := out.Data[0]
	s := Sample{GramsPerKWh: *p.Value * LbPerMWhToGPerKWh}
	if p.PointTime != "" {
		at, err := time.Parse(time.RFC3339, p.PointTime)
		if err != nil {
			return Sample{}, unreadable("watttime %s: point_time %q: %v", w.Region, p.PointTime, err)
		}
		s.At = at
	}
	return s, nil
}
