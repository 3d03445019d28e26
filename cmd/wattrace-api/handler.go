package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
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

// newAPIHandler returns the handler of the API's routes (/api/v1/…,
// /health, the OpenAPI document). This is the seam where pkg/units/api
// plugs in; until then only /health answers.
func newAPIHandler(d apiDeps) (http.Handler, error) {
	mux := http.NewServeMux()
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
