package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/units/access"
	unitsapi "github.com/wattrace/wattrace/internal/units/api"
	"github.com/wattrace/wattrace/internal/units/updater"
	"github.com/wattrace/wattrace/pkg/units"
)

// The API's access-control keys (internal/units/access, internal/units/api).
const (
	KeyAPIUserHeader     = "api.user-header"
	KeyAPITrustedProxies = "api.trusted-proxies"
	KeyAPIAdmins         = "api.admins"
	KeyAPIMaxRange       = "api.max-range"
	KeyAPITokensFile     = "api.tokens-file"
)

// API is the access control of the HTTP API (internal/units/api).
type API struct {
	// UserHeader names the header a trusted proxy sets to the user.
	UserHeader string
	// TrustedProxies are the networks (CIDR or address) whose UserHeader
	// is believed; the check of api.trusted-proxies parses them from
	// trustedProxies.
	TrustedProxies []*net.IPNet
	trustedProxies []string
	// Admins see every unit.
	Admins []string
	// MaxRange is the longest time range a query may ask for.
	MaxRange time.Duration
	// TokensFile maps users to the SHA-256 of their bearer tokens
	// (internal/units/access.LoadTokens).
	TokensFile string
}

// Declare declares api.user-header, api.trusted-proxies, api.admins,
// api.max-range and api.tokens-file, bound to a.
func (a *API) Declare(s *setting.Set) {
	s.String(&a.UserHeader, KeyAPIUserHeader, unitsapi.DefaultUserHeader, "Header a trusted proxy (Grafana) sets to the requesting user.").Checked(func() error {
		if a.UserHeader == "" {
			return setting.Invalid(KeyAPIUserHeader, "", "a header name is required")
		}
		return nil
	})
	s.Strings(&a.trustedProxies, KeyAPITrustedProxies, nil, "Networks (CIDR or address) whose requests are a proxy without any credential, their user header believed: weaker than api.proxies, since anyone who can send from them is the proxy. Repeatable.").Checked(a.parseTrustedProxies)
	s.Strings(&a.Admins, KeyAPIAdmins, nil, "Users who see every unit. Repeatable.")
	s.AnyDuration(&a.MaxRange, KeyAPIMaxRange, 366*24*time.Hour, "Longest time range one query may ask for.").Checked(positive(KeyAPIMaxRange, &a.MaxRange))
	s.String(&a.TokensFile, KeyAPITokensFile, "", "YAML file mapping users to the hex SHA-256 of their bearer tokens (wattrace acct --token). Empty: no tokens.")
}

// parseTrustedProxies reads CIDRs or single addresses into
// TrustedProxies.
func (a *API) parseTrustedProxies() error {
	a.TrustedProxies = nil
	var errs []error
	for _, s := range a.trustedProxies {
		if !strings.Contains(s, "/") {
			if ip := net.ParseIP(s); ip != nil {
				bits := 128
				if ip.To4() != nil {
					ip, bits = ip.To4(), 32
				}
				a.TrustedProxies = append(a.TrustedProxies, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
				continue
			}
		}
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			errs = append(errs, setting.Invalid(KeyAPITrustedProxies, s, "want a CIDR such as 10.0.0.0/8 or an address"))
			continue
		}
		a.TrustedProxies = append(a.TrustedProxies, n)
	}
	return errors.Join(errs...)
}

// Identity and MUNGE: who may name a user, and how `wattrace acct`
// proves who it is.
const (
	KeyAPIProxies        = "api.proxies"
	KeyAPIMungeEnabled   = "api.munge.enabled"
	KeyAPIMungeAudiences = "api.munge.audiences"
	KeyAPIMungeUnmunge   = "api.munge.unmunge"
	KeyAPIMungeSocket    = "api.munge.socket"
	KeyAPIMungeMaxTTL    = "api.munge.max-ttl"
)

// Identity is who may authenticate how (internal/units/access).
type Identity struct {
	// Proxies are the principals (basic-auth users of the web config,
	// client certificate CNs) that may name the user in the user header.
	Proxies []string
	// Munge enables `Authorization: MUNGE` credentials (wattrace acct).
	Munge MungeSettings
}

// MungeSettings configures MUNGE credentials.
type MungeSettings struct {
	Enabled bool
	// Audiences are the URLs clients reach this server under; a
	// credential made for another URL is refused.
	Audiences []string
	// Unmunge is the unmunge command.
	Unmunge string
	// Socket is munged's socket, given to unmunge (its default when
	// empty).
	Socket string
	// MaxTTL is the longest-lived credential accepted.
	MaxTTL time.Duration
}

// Declare declares api.proxies and api.munge.*, bound to i.
func (i *Identity) Declare(s *setting.Set) {
	m := &i.Munge
	s.Strings(&i.Proxies, KeyAPIProxies, nil, "Principals (basic-auth users of web.config.file, client certificate CNs) that may name the user in api.user-header, e.g. grafana. Repeatable.").Checked(func() error {
		var errs []error
		for _, p := range i.Proxies {
			if strings.TrimSpace(p) == "" {
				errs = append(errs, setting.Invalid(KeyAPIProxies, p, "a principal name"))
			}
		}
		return errors.Join(errs...)
	})
	s.Bool(&m.Enabled, KeyAPIMungeEnabled, false, "Accept MUNGE credentials (Authorization: MUNGE …, sent by wattrace acct); needs munged and unmunge on this host.")
	s.Strings(&m.Audiences, KeyAPIMungeAudiences, nil, "URLs clients reach this server under (https://host:port); a MUNGE credential made for another is refused. Required with api.munge.enabled.").Checked(func() error {
		if m.Enabled && len(m.Audiences) == 0 {
			return setting.Invalid(KeyAPIMungeAudiences, "", "required with api.munge.enabled: the URLs clients reach this server under")
		}
		return nil
	})
	s.String(&m.Unmunge, KeyAPIMungeUnmunge, "unmunge", "The unmunge command.").Checked(func() error {
		if m.Enabled && m.Unmunge == "" {
			return setting.Invalid(KeyAPIMungeUnmunge, "", "required with api.munge.enabled")
		}
		return nil
	})
	s.String(&m.Socket, KeyAPIMungeSocket, "", "munged's socket, passed to unmunge as --socket (default: munge's own, /run/munge/munge.socket.2).")
	s.AnyDuration(&m.MaxTTL, KeyAPIMungeMaxTTL, 5*time.Minute, "Longest time-to-live, and age, of a MUNGE credential accepted.").Checked(func() error {
		if m.Enabled && m.MaxTTL <= 0 {
			return setting.Invalid(KeyAPIMungeMaxTTL, m.MaxTTL, "must be positive")
		}
		return nil
	})
}

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
