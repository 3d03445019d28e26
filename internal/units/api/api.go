// Package api is the units store's HTTP API: the units (Slurm jobs, pods,
// VMs, containers, systemd units) a user ran and what they used, for
// Grafana (Infinity or JSON API data source), `wattrace acct` and query
// proxies. Answers are Prometheus's envelope,
// {"status":"success","data":…} or
// {"status":"error","errorType":…,"error":…}, as CEEMS's API server
// answers.
//
// Who asks is internal/units/access's decision (Access); a user sees only their
// own units and their own projects' usage, admins see all.
// Every query parameter is validated here (params.go) before the store is
// asked: a bad one is a 400 with a message, never a 500.
package api

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

// OpenAPI is the API's OpenAPI 3 document, served at /api/v1/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Defaults of Config.
const (
	DefaultUserHeader   = "X-Grafana-User"
	DefaultMaxRange     = 366 * 24 * time.Hour
	DefaultDefaultRange = 30 * 24 * time.Hour
)

// Config configures the API.
type Config struct {
	Access
	// MaxRange is the longest from–to range a query may ask
	// (api.max-range); longer ones are refused with 400.
	MaxRange time.Duration
	// DefaultRange is the range of a query that gives no from (ending at
	// to, or now).
	DefaultRange time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Validate reports a configuration the API cannot serve with, naming the
// key.
func (c *Config) Validate() error {
	var errs []error
	if c.UserHeader == "" || strings.ContainsAny(c.UserHeader, " :\t\r\n") {
		errs = append(errs, fmt.Errorf("invalid value %q for api.user-header: a header name", c.UserHeader))
	}
	if c.MaxRange <= 0 {
		errs = append(errs, fmt.Errorf("invalid value %s for api.max-range: must be positive", c.MaxRange))
	}
	if c.DefaultRange <= 0 || c.DefaultRange > c.MaxRange {
		errs = append(errs, fmt.Errorf("invalid value %s for api.default-range: positive and at most api.max-range (%s)", c.DefaultRange, c.MaxRange))
	}
	for _, a := range c.Admins {
		if !name.MatchString(a) {
			errs = append(errs, fmt.Errorf("invalid value %q for api.admins: a user name", a))
		}
	}
	for h, u := range c.Tokens {
		if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" || !name.MatchString(u) {
			errs = append(errs, fmt.Errorf("invalid entry for user %q in api.tokens-file: a lower-case hex SHA-256 and a user name", u))
		}
	}
	return errors.Join(errs...)
}

// ParseNetworks parses api.trusted-proxies: CIDRs or single addresses.
func ParseNetworks(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("invalid value %q for api.trusted-proxies: %w", s, err)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("invalid value %q for api.trusted-proxies: %w", s, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// API serves the units store.
type API struct {
	store units.Reader
	cfg   Config
	log   *slog.Logger
}

// New returns the API over store; cfg is validated.
func New(store units.Reader, cfg Config, log *slog.Logger) (*API, error) {
	if cfg.UserHeader == "" {
		cfg.UserHeader = DefaultUserHeader
	}
	if cfg.MaxRange == 0 {
		cfg.MaxRange = DefaultMaxRange
	}
	if cfg.DefaultRange == 0 {
		cfg.DefaultRange = min(DefaultDefaultRange, cfg.MaxRange)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &API{store: store, cfg: cfg, log: log}, nil
}

// Handler routes the API's paths.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", a.health)
	mux.HandleFunc("GET /api/v1/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(OpenAPI)
	})
	mux.Handle("GET /api/v1/units", a.authed(a.units))
	mux.Handle("GET /api/v1/units/verify", a.authed(a.verify))
	mux.Handle("GET /api/v1/units/{id}", a.authed(a.unit))
	mux.Handle("GET /api/v1/usage", a.authed(a.usage))
	mux.Handle("GET /api/v1/projects", a.authed(a.projects))
	mux.Handle("GET /api/v1/users", a.authed(a.users))
	// Anything else: a JSON 404, so clients parse every answer alike.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such path: "+clip(r.URL.Path)+" (see /api/v1/openapi.yaml)")
	})
	return a.recoverer(mux)
}

// authed identifies the caller before h runs.
func (a *API) authed(h func(http.ResponseWriter, *http.Request, identity) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := a.cfg.identify(r)
		if err == nil {
			err = h(w, r, id)
		}
		if err != nil {
			a.fail(w, r, id, err)
		}
	})
}

// recoverer turns a panic into a 500 with the envelope, logged, so one bad
// request cannot take the server down.
func (a *API) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				a.log.Error("panic serving request", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				writeError(w, http.StatusInternalServerError, "internal", "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// forbidden is a 403: the caller may not see what they asked for.
func forbidden(format string, a ...any) error {
	return &accessError{http.StatusForbidden, fmt.Sprintf(format, a...)}
}

// fail answers err with its status.
func (a *API) fail(w http.ResponseWriter, r *http.Request, id identity, err error) {
	var ae *accessError
	switch {
	case errors.As(err, &ae):
		typ := "forbidden"
		switch ae.status {
		case http.StatusUnauthorized:
			typ = "unauthorized"
		case http.StatusBadRequest:
			typ = "bad_data"
		}
		a.log.Info("refused", "path", r.URL.Path, "remote", r.RemoteAddr, "user", id.user, "reason", ae.msg)
		writeError(w, ae.status, typ, ae.msg)
	case isBadRequest(err):
		writeError(w, http.StatusBadRequest, "bad_data", err.Error())
	case errors.Is(err, units.ErrInvalid):
		writeError(w, http.StatusBadRequest, "bad_data", err.Error())
	case errors.Is(err, units.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, units.ErrAmbiguous):
		writeError(w, http.StatusBadRequest, "bad_data", err.Error()+": name cluster and kind")
	default:
		a.log.Error("store failed", "path", r.URL.Path, "query", r.URL.RawQuery, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "the units store failed; see the server's log")
	}
}

type envelope struct {
	Status    string `json:"status"`
	Data      any    `json:"data,omitempty"`
	ErrorType string `json:"errorType,omitempty"`
	Error     string `json:"error,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v envelope) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, envelope{Status: "error", ErrorType: typ, Error: msg})
}

// list answers an empty list as [], never null.
func list[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func success(w http.ResponseWriter, data any) error {
	writeJSON(w, http.StatusOK, envelope{Status: "success", Data: data})
	return nil
}

func (a *API) health(w http.ResponseWriter, r *http.Request) {
	if err := a.store.Ping(r.Context()); err != nil {
		a.log.Warn("health: store does not answer", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the units store does not answer")
		return
	}
	_ = success(w, "ok")
}

// scopeUsers returns the users a query may cover: what it asked (or
// everyone) for an admin; the caller alone otherwise, and asking for
// anyone else is forbidden.
func scopeUsers(id identity, asked []string) ([]string, error) {
	if id.admin {
		return asked, nil
	}
	if err := onlySelf(id, asked, "see the units of"); err != nil {
		return nil, err
	}
	return []string{id.user}, nil
}

// onlySelf forbids a non-admin to name any user but themselves; doing
// says what they asked to do with the others' units.
func onlySelf(id identity, asked []string, doing string) error {
	if id.admin {
		return nil
	}
	for _, u := range asked {
		if u != id.user {
			return forbidden("user %s may not %s %s (admins only)", id.user, doing, u)
		}
	}
	return nil
}

// selection is what /units and /usage both filter on: users, projects
// and clusters, kinds, and the time range (bounded by the configuration).
type selection struct {
	units.Membership
	kinds    []units.Kind
	from, to time.Time
}

// selection reads a query that accepts keys, and the selection among
// them; the handler reads the rest of p.
func (a *API) selection(r *http.Request, keys ...string) (*params, selection, error) {
	var sel selection
	p, err := newParams(r.URL.RawQuery, keys...)
	if err != nil {
		return nil, sel, err
	}
	if sel.Membership, err = membership(p); err != nil {
		return nil, sel, err
	}
	ks, err := p.kinds()
	if err != nil {
		return nil, sel, err
	}
	for _, k := range ks {
		sel.kinds = append(sel.kinds, units.Kind(k))
	}
	tr, err := p.timeRange(a.cfg.Now(), a.cfg.DefaultRange, a.cfg.MaxRange)
	if err != nil {
		return nil, sel, err
	}
	sel.from, sel.to = tr.From, tr.To
	return p, sel, nil
}

var unitParams = []string{"user", "project", "cluster", "kind", "id", "from", "to", "running", "fields", "limit", "offset"}

func (a *API) units(w http.ResponseWriter, r *http.Request, id identity) error {
	p, sel, err := a.selection(r, unitParams...)
	if err != nil {
		return err
	}
	f := units.Filter{Users: sel.Users, Projects: sel.Projects, Clusters: sel.Clusters, Kinds: sel.kinds, From: sel.from, To: sel.to}
	if f.IDs, err = p.ids("id"); err != nil {
		return err
	}
	if f.Running, err = p.boolean("running"); err != nil {
		return err
	}
	asked, err := p.fields(fields)
	if err != nil {
		return err
	}
	if !slices.Contains(asked, "totals") {
		// Totals need figures and times: then the store is asked for all.
		f.Fields = asked
	}
	if f.Limit, err = p.integer("limit", units.DefaultLimit, 1, units.MaxLimit); err != nil {
		return err
	}
	if f.Offset, err = p.integer("offset", 0, 0, 1<<30); err != nil {
		return err
	}
	if f.Users, err = scopeUsers(id, f.Users); err != nil {
		return err
	}
	us, err := a.store.Units(r.Context(), f)
	if err != nil {
		return err
	}
	if !id.admin {
		// The store was asked for the caller's units only; a unit of
		// anyone else here would be a store bug, and is not shown.
		us = slices.DeleteFunc(us, func(u units.Unit) bool { return u.User != id.user })
	}
	vs := views(us, a.cfg.Now())
	if len(asked) == 0 {
		return success(w, vs)
	}
	out, err := trim(vs, asked)
	if err != nil {
		return err
	}
	return success(w, out)
}

// view is a unit as the API answers it: the store's fields and totals
// computed from them, so that a dashboard or a script needs no knowledge
// of which zones overlap (units.TotalZones).
type view struct {
	units.Unit
	Totals totals `json:"totals"`
}

// totals are a unit's figures summed once: energy over the zones that
// don't overlap, CO2e of the first provider, wall time so far, and the
// unit's time range in Unix milliseconds for dashboard links (end: now
// while it runs).
type totals struct {
	energyTotals
	WallSeconds float64 `json:"wall_seconds"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	GPUSeconds  float64 `json:"gpu_seconds"`
	// GPUIdleSeconds: of GPUSeconds, the time the unit held GPUs none of
	// its processes used (always present, unlike the figure, so a
	// dashboard column has a value for every unit).
	GPUIdleSeconds float64 `json:"gpu_idle_seconds"`
	StartMs        int64   `json:"start_ms,omitempty"`
	EndMs          int64   `json:"end_ms,omitempty"`
}

// usageView is a usage bucket with its totals (as view's).
type usageView struct {
	units.Usage
	Totals energyTotals `json:"totals"`
}

// energyTotals are the totals a unit and a usage bucket both carry.
type energyTotals struct {
	Joules float64 `json:"joules"`
	KWh    float64 `json:"kwh"`
	Grams  float64 `json:"grams"`
}

func energyOf(f units.Figures) energyTotals {
	j := f.Joules()
	return energyTotals{Joules: j, KWh: j / 3.6e6, Grams: f.Grams("")}
}

// fields are the names fields= accepts: the store's and totals.
var fields = append(slices.Clone(units.Fields), "totals")

func views(us []units.Unit, now time.Time) []view {
	out := make([]view, len(us))
	for i, u := range us {
		out[i] = newView(u, now)
	}
	return out
}

func newView(u units.Unit, now time.Time) view {
	v := view{Unit: u, Totals: totals{energyTotals: energyOf(u.Figures), WallSeconds: u.WallSeconds(now),
		CPUSeconds: u.Figures.CPUSeconds, GPUSeconds: u.Figures.GPUSeconds, GPUIdleSeconds: u.Figures.GPUIdleSeconds}}
	if !u.Start.IsZero() {
		v.Totals.StartMs = u.Start.UnixMilli()
		end := u.End
		if end.IsZero() {
			end = now
		}
		v.Totals.EndMs = end.UnixMilli()
	}
	return v
}

// trim keeps only the requested fields of each unit.
func trim(us []view, fields []string) ([]map[string]json.RawMessage, error) {
	out := make([]map[string]json.RawMessage, 0, len(us))
	for _, u := range us {
		b, err := json.Marshal(u)
		if err != nil {
			return nil, fmt.Errorf("encoding unit %s: %w", u.ID, err)
		}
		var all map[string]json.RawMessage
		if err := json.Unmarshal(b, &all); err != nil {
			return nil, fmt.Errorf("decoding unit %s: %w", u.ID, err)
		}
		m := make(map[string]json.RawMessage, len(fields))
		for _, f := range fields {
			if v, ok := all[f]; ok {
				m[f] = v
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func (a *API) unit(w http.ResponseWriter, r *http.Request, id identity) error {
	p, err := newParams(r.URL.RawQuery, "cluster", "kind")
	if err != nil {
		return err
	}
	uid := r.PathValue("id")
	if !unitID.MatchString(uid) {
		return badf("invalid unit id %q", clip(uid))
	}
	k := units.Key{ID: uid}
	if k.Cluster, err = p.one("cluster"); err != nil {
		return err
	}
	if k.Cluster != "" && !name.MatchString(k.Cluster) {
		return badf("invalid cluster %q", clip(k.Cluster))
	}
	kind, err := p.enum("kind", "", kinds...)
	if err != nil {
		return err
	}
	k.Kind = units.Kind(kind)
	u, err := a.store.Unit(r.Context(), k)
	if err != nil {
		return err
	}
	if !id.admin && u.User != id.user {
		return forbidden("unit %s belongs to another user", uid)
	}
	return success(w, newView(u, a.cfg.Now()))
}

// keys reads /units/verify's units: id=ID with cluster= and kind= for all,
// or id=CLUSTER/KIND/ID each.
func keys(p *params) ([]units.Key, error) {
	cluster, err := p.one("cluster")
	if err != nil {
		return nil, err
	}
	if cluster != "" && !name.MatchString(cluster) {
		return nil, badf("invalid cluster %q", clip(cluster))
	}
	kind, err := p.enum("kind", "", kinds...)
	if err != nil {
		return nil, err
	}
	var out []units.Key
	for _, raw := range p.v["id"] {
		for _, s := range strings.Split(raw, ",") {
			k := units.Key{Cluster: cluster, Kind: units.Kind(kind), ID: s}
			if parts := strings.Split(s, "/"); len(parts) == 3 {
				k = units.Key{Cluster: parts[0], Kind: units.Kind(parts[1]), ID: parts[2]}
				if !k.Kind.Valid() || !name.MatchString(k.Cluster) {
					return nil, badf("invalid unit %q: CLUSTER/KIND/ID or ID", clip(s))
				}
			}
			if !unitID.MatchString(k.ID) {
				return nil, badf("invalid unit id %q", clip(k.ID))
			}
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, badf("no unit: give id= at least once")
	}
	if len(out) > maxValues {
		return nil, badf("too many units: %d, at most %d", len(out), maxValues)
	}
	return out, nil
}

func (a *API) verify(w http.ResponseWriter, r *http.Request, id identity) error {
	p, err := newParams(r.URL.RawQuery, "id", "cluster", "kind", "user")
	if err != nil {
		return err
	}
	ks, err := keys(p)
	if err != nil {
		return err
	}
	asked, err := p.names("user")
	if err != nil {
		return err
	}
	if len(asked) > 1 {
		return badf("parameter \"user\" given %d times, at most once", len(asked))
	}
	user := id.user
	if len(asked) == 1 {
		if err := onlySelf(id, asked, "verify units for"); err != nil {
			return err
		}
		user = asked[0]
	} else if id.admin {
		return success(w, map[string]bool{"owned": true})
	}
	ok, err := a.store.Owned(r.Context(), user, ks)
	if err != nil {
		return err
	}
	if !ok {
		return forbidden("user %s does not own all of these units", user)
	}
	return success(w, map[string]bool{"owned": true})
}

var usageParams = []string{"user", "project", "cluster", "kind", "from", "to", "by", "period"}

func (a *API) usage(w http.ResponseWriter, r *http.Request, id identity) error {
	p, sel, err := a.selection(r, usageParams...)
	if err != nil {
		return err
	}
	q := units.UsageQuery{Users: sel.Users, Projects: sel.Projects, Clusters: sel.Clusters, Kinds: sel.kinds, From: sel.from, To: sel.to}
	by, err := p.names("by")
	if err != nil {
		return err
	}
	for _, b := range by {
		g := units.GroupBy(b)
		switch g {
		case units.ByUser, units.ByProject, units.ByCluster, units.ByKind:
		default:
			return badf("invalid by %q: one of user, project, cluster, kind", clip(b))
		}
		q.By = append(q.By, g)
	}
	period, err := p.enum("period", "total", "total", "day", "month")
	if err != nil {
		return err
	}
	if period != "total" {
		q.Period = units.Period(period)
	}
	if !id.admin {
		if err := a.scopeUsage(r, id, &q); err != nil {
			return err
		}
	}
	us, err := a.store.Usage(r.Context(), q)
	if err != nil {
		return err
	}
	out := make([]usageView, len(us))
	for i, u := range us {
		out[i] = usageView{Usage: u, Totals: energyOf(u.Figures)}
	}
	return success(w, out)
}

// scopeUsage narrows a non-admin's usage query: their own units, or the
// totals of projects they are in (without splitting them by user, which
// would show the others' usage). Membership is per cluster: a project of
// the same name on another cluster is another project, so the query is
// narrowed to the (cluster, project) pairs the caller is in, and a
// project they are in on none of the clusters asked is forbidden.
func (a *API) scopeUsage(r *http.Request, id identity, q *units.UsageQuery) error {
	if err := onlySelf(id, q.Users, "see the usage of"); err != nil {
		return err
	}
	if len(q.Projects) == 0 || len(q.Users) > 0 {
		q.Users = []string{id.user}
		return nil
	}
	if slices.Contains(q.By, units.ByUser) {
		return forbidden("a project's usage split by user is for admins; add user=%s for your own", id.user)
	}
	mine, err := a.store.Users(r.Context(), units.Membership{Users: []string{id.user}, Clusters: q.Clusters, Projects: q.Projects})
	if err != nil {
		return err
	}
	q.Within = nil
	for _, pr := range q.Projects {
		in := false
		for _, u := range mine {
			if u.Name == id.user && slices.Contains(u.Projects, pr) {
				q.Within = append(q.Within, units.ClusterProject{Cluster: u.Cluster, Project: pr})
				in = true
			}
		}
		if !in {
			if len(q.Clusters) > 0 {
				return forbidden("user %s is not in project %s on cluster %s", id.user, pr, strings.Join(q.Clusters, ","))
			}
			return forbidden("user %s is not in project %s", id.user, pr)
		}
	}
	return nil
}

func membership(p *params) (units.Membership, error) {
	var m units.Membership
	var err error
	if m.Users, err = p.names("user"); err != nil {
		return m, err
	}
	if m.Projects, err = p.names("project"); err != nil {
		return m, err
	}
	m.Clusters, err = p.names("cluster")
	return m, err
}

// scopedMembership reads /projects' and /users' parameters, narrowed to
// what the caller may see.
func scopedMembership(r *http.Request, id identity) (units.Membership, error) {
	p, err := newParams(r.URL.RawQuery, "user", "project", "cluster")
	if err != nil {
		return units.Membership{}, err
	}
	m, err := membership(p)
	if err != nil {
		return m, err
	}
	m.Users, err = scopeUsers(id, m.Users)
	return m, err
}

func (a *API) projects(w http.ResponseWriter, r *http.Request, id identity) error {
	m, err := scopedMembership(r, id)
	if err != nil {
		return err
	}
	ps, err := a.store.Projects(r.Context(), m)
	if err != nil {
		return err
	}
	if !id.admin {
		// A project's other members are not the caller's to list.
		for i := range ps {
			ps[i].Users = []string{id.user}
		}
	}
	return success(w, list(ps))
}

func (a *API) users(w http.ResponseWriter, r *http.Request, id identity) error {
	m, err := scopedMembership(r, id)
	if err != nil {
		return err
	}
	us, err := a.store.Users(r.Context(), m)
	if err != nil {
		return err
	}
	return success(w, list(us))
}
