package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
	unitsapi "github.com/wattrace/wattrace/pkg/units/api"
	"github.com/wattrace/wattrace/pkg/units/updater"
)

// apiDeps is what the HTTP API is built from.
type apiDeps struct {
	// Reader is the units store.
	Reader units.Reader
	// Access is the access-control configuration (api.* keys).
	Access API
	// WebConfigFile is exporter-toolkit's web config (TLS, client
	// certificates, basic auth), already enforced before the handler.
	WebConfigFile string
	// Updater reports the TSDB cycles (Last, Stats) for /health.
	Updater *updater.Updater
	Log     *slog.Logger
}

// newAPIHandler returns the handler of the API's routes: /health here
// (the store and the updater's cycles), everything else pkg/units/api's
// (/api/v1/…, the OpenAPI document).
func newAPIHandler(d apiDeps) (http.Handler, error) {
	authenticated, err := unitsapi.WebConfigAuthenticates(d.WebConfigFile)
	if err != nil {
		return nil, err
	}
	tokens, err := unitsapi.LoadTokens(d.Access.TokensFile)
	if err != nil {
		return nil, err
	}
	nets := make([]netip.Prefix, 0, len(d.Access.TrustedProxies))
	for _, n := range d.Access.TrustedProxies {
		addr, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			return nil, fmt.Errorf("invalid value %q for %s", n, KeyAPITrustedProxies)
		}
		ones, _ := n.Mask.Size()
		nets = append(nets, netip.PrefixFrom(addr.Unmap(), ones))
	}
	a, err := unitsapi.New(d.Reader, unitsapi.Config{
		Access: unitsapi.Access{
			UserHeader:      d.Access.UserHeader,
			TrustedNetworks: nets,
			Authenticated:   authenticated,
			Admins:          d.Access.Admins,
			Tokens:          tokens,
		},
		MaxRange: d.Access.MaxRange,
	}, d.Log)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", a.Handler())
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		status, code := "success", http.StatusOK
		body := map[string]any{}
		if err := d.Reader.Ping(r.Context()); err != nil {
			status, code = "error", http.StatusServiceUnavailable
			body["store"] = err.Error()
		} else {
			body["store"] = "ok"
		}
		if d.Updater != nil {
			s := d.Updater.Stats()
			body["updater"] = map[string]any{"last_success": s.LastSuccess.UTC().Format(time.RFC3339), "cycles": s.Cycles, "failures": s.Failures}
		}
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"status": status, "data": body})
	})
	return mux, nil
}
