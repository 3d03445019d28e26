package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/wattrace/wattrace/internal/units/access"
	unitsapi "github.com/wattrace/wattrace/internal/units/api"
	"github.com/wattrace/wattrace/internal/units/updater"
	"github.com/wattrace/wattrace/pkg/units"
)

// apiDeps is what the HTTP API is built from.
type apiDeps struct {
	// Reader is the units store.
	Reader units.Reader
	// Access is the access-control configuration (api.* keys).
	Access API
	// Identity is the identity block (api.proxies, api.munge.*).
	Identity Identity
	// BasicUsers are the web config's basic_auth_users (user → bcrypt),
	// checked by the API, not by exporter-toolkit.
	BasicUsers map[string]string
	// Updater reports the TSDB cycles (Last, Stats) for /health.
	Updater *updater.Updater
	Log     *slog.Logger
	// Built is the access control newAccess made from the fields above,
	// when the caller shares it (with the query guard: one MUNGE replay
	// cache, one set of principals); nil builds it here.
	Built *access.Access
}

// newAccess builds who the server believes from the api.* keys, the
// identity block and the web configuration's basic-auth users. The API and
// the query guard share the one it returns, so a MUNGE credential spent on
// one cannot be replayed on the other.
func newAccess(d apiDeps) (*access.Access, error) {
	tokens, err := access.LoadTokens(d.Access.TokensFile)
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
	header := d.Access.UserHeader
	if header == "" {
		header = unitsapi.DefaultUserHeader
	}
	acc := &access.Access{
		UserHeader:      header,
		TrustedNetworks: nets,
		Proxies:         d.Identity.Proxies,
		Admins:          d.Access.Admins,
		Tokens:          tokens,
	}
	if len(d.BasicUsers) > 0 {
		if acc.Basic, err = access.NewBasic(d.BasicUsers); err != nil {
			return nil, fmt.Errorf("%s: %w", KeyWebConfigFile, err)
		}
	}
	if m := d.Identity.Munge; m.Enabled {
		if acc.Munge, err = access.NewMunge(access.MungeConfig{Unmunge: m.Unmunge, Socket: m.Socket, Audiences: m.Audiences, MaxTTL: m.MaxTTL}); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

// newAPIHandler returns the handler of the API's routes: /health here
// (the store and the updater's cycles), everything else internal/units/api's
// (/api/v1/…, the OpenAPI document).
func newAPIHandler(d apiDeps) (http.Handler, error) {
	acc := d.Built
	if acc == nil {
		var err error
		if acc, err = newAccess(d); err != nil {
			return nil, err
		}
	}
	a, err := unitsapi.New(d.Reader, unitsapi.Config{
		Access:   *acc,
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
			// Anyone may ask /health: the store's error (a PostgreSQL
			// host, a user, a path) is for the log only.
			d.Log.Warn("health: the store does not answer", "err", err)
			status, code = "error", http.StatusServiceUnavailable
			body["store"] = "down"
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
