// Package guard is a query guard in front of a Prometheus-compatible query
// API (Prometheus, Thanos, Mimir, VictoriaMetrics): it lets a user who can
// open Grafana read their own jobs', pods' and VMs' series and nothing
// else.
//
// It parses every query with Prometheus's PromQL parser and scopes every
// selector, wherever it sits in the expression (matrix selectors,
// subqueries, function arguments, both sides of `or`/`unless`/`and`, with
// `@` or offset): a selector must name its family by a `__name__`
// equality, and the owner matchers of that family (user="alice",
// namespace=~"proj_a|proj_b", vm_uuid=~"…") are appended to the user's
// own, never replacing them, so a widening regex is intersected with the
// owner's value. The scoped expression is printed, re-parsed and checked
// again, and only then forwarded, in a request rebuilt from the validated
// parameters only. A query that hides job ids in text (CEEMS's ceems_lb
// finds them with a regex, so `x{uuid="mine"} or other_metric` passes)
// has nothing to hide behind here.
//
// Answers are Prometheus's envelope; refusals are 403 forbidden, bad
// input 400 bad_data, an upstream that fails 502 or 503; no user input
// yields a 500.
package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Caller is who asks.
type Caller struct {
	User  string
	Admin bool
}

// Identifier says who sent a request. An error that has an
// `HTTPStatus() int` method is answered with that status (401, 403, 400),
// any other with 401.
type Identifier interface {
	Identify(r *http.Request) (Caller, error)
}

// IdentifierFunc adapts a function to Identifier.
type IdentifierFunc func(r *http.Request) (Caller, error)

// Identify calls f.
func (f IdentifierFunc) Identify(r *http.Request) (Caller, error) { return f(r) }

// Scopes says what a user owns in the units store.
type Scopes interface {
	// Projects are the user's projects (Slurm accounts, Kubernetes
	// namespaces).
	Projects(ctx context.Context, user string) ([]string, error)
	// VMs are the ids (uuids) of the user's VM units.
	VMs(ctx context.Context, user string) ([]string, error)
}

// Defaults of Config.
const (
	DefaultMaxQueryLength = 16 << 10
	DefaultTimeout        = 2 * time.Minute
	DefaultScopesTTL      = time.Minute
)

// Config configures a Guard.
type Config struct {
	// Upstream is the query API's base URL (with Mimir's /prometheus or
	// a Thanos prefix when it has one); /api/v1/… is appended.
	Upstream *url.URL
	// Transport sends upstream requests (authentication, TLS); nil is
	// http.DefaultTransport.
	Transport http.RoundTripper
	Policy    Policy
	// MaxQueryLength bounds a query or match[] selector, in bytes.
	MaxQueryLength int
	// Timeout bounds one upstream request.
	Timeout    time.Duration
	Identifier Identifier
	Scopes     Scopes
	// ScopesTTL is how long a user's projects and VMs are cached.
	ScopesTTL time.Duration
	// Registerer gets the guard's metrics (none when nil).
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// Guard is the handler. Mount it where its paths start at /api/v1/
// (http.StripPrefix for a prefix such as /tsdb).
type Guard struct {
	cfg     Config
	parser  parser.Parser
	scopes  *scopeCache
	client  *http.Client
	metrics *metrics
	log     *slog.Logger
}

// New validates cfg and returns the guard.
func New(cfg Config) (*Guard, error) {
	if cfg.Upstream == nil || (cfg.Upstream.Scheme != "http" && cfg.Upstream.Scheme != "https") || cfg.Upstream.Host == "" {
		return nil, errors.New("guard: the upstream must be an http(s) URL")
	}
	if cfg.Identifier == nil || cfg.Scopes == nil {
		return nil, errors.New("guard: an Identifier and Scopes are required")
	}
	if cfg.MaxQueryLength == 0 {
		cfg.MaxQueryLength = DefaultMaxQueryLength
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ScopesTTL == 0 {
		cfg.ScopesTTL = DefaultScopesTTL
	}
	if cfg.MaxQueryLength < 0 || cfg.Timeout < 0 || cfg.ScopesTTL < 0 {
		return nil, errors.New("guard: negative limits")
	}
	if cfg.Policy.ClusterLabel != "" && !labelName.MatchString(cfg.Policy.ClusterLabel) {
		return nil, fmt.Errorf("guard: cluster label %q is not a label name", cfg.Policy.ClusterLabel)
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	u := *cfg.Upstream
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	cfg.Upstream = &u
	return &Guard{
		cfg: cfg,
		// Experimental functions parse, so that a query using one is
		// answered by the upstream's own feature flags; the one of them
		// that reads unnamed series (info) is refused by the walker.
		parser:  parser.NewParser(parser.Options{EnableExperimentalFunctions: true}),
		scopes:  newScopeCache(cfg.Scopes, cfg.ScopesTTL, time.Now),
		client:  &http.Client{Transport: cfg.Transport, CheckRedirect: noRedirects},
		metrics: m,
		log:     cfg.Log,
	}, nil
}

// noRedirects keeps the client from following an upstream's redirect to
// somewhere the guard was not configured to talk to.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// ServeHTTP answers one query API request.
func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ep, labelName, ok := endpointFor(r.URL.Path)
	name := ep.name
	if !ok {
		name = "other"
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			g.log.Error("panic serving a guarded query", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			g.metrics.outcome(name, "internal")
			writeError(w, http.StatusInternalServerError, "internal", "internal error")
		}
	}()
	if !ok {
		g.refuse(w, name, &Error{http.StatusNotFound, "not_found", "no such path: " + clip(r.URL.Path) + " (the guard serves /api/v1/query, query_range, series, labels, label/<name>/values, query_exemplars)"})
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		g.refuse(w, name, &Error{http.StatusMethodNotAllowed, "bad_data", "method " + r.Method + " not allowed"})
		return
	}
	caller, err := g.cfg.Identifier.Identify(r)
	if err != nil {
		g.refuse(w, name, identityError(err))
		return
	}
	up, err := g.rewrite(r, ep, labelName, caller)
	if err != nil {
		g.refuse(w, name, err)
		return
	}
	g.forward(r.Context(), w, name, up)
}

// identityError gives an identification failure its status.
func identityError(err error) error {
	status := http.StatusUnauthorized
	var hs interface{ HTTPStatus() int }
	if errors.As(err, &hs) && hs.HTTPStatus() >= 400 && hs.HTTPStatus() < 500 {
		status = hs.HTTPStatus()
	}
	typ := "unauthorized"
	switch status {
	case http.StatusForbidden:
		typ = "forbidden"
	case http.StatusBadRequest:
		typ = "bad_data"
	}
	return &Error{status, typ, err.Error()}
}

// upstream is the request to send: its path, method and parameters.
type upstream struct {
	path   string
	method string
	form   url.Values
}

// rewrite validates r and returns the upstream request, every selector
// scoped for a non-admin.
func (g *Guard) rewrite(r *http.Request, ep endpoint, label string, c Caller) (*upstream, error) {
	if label != "" && !labelName.MatchString(label) {
		return nil, badData("invalid label name %q", clip(label))
	}
	form, err := readForm(r, int64(4*g.cfg.MaxQueryLength+64<<10))
	if err != nil {
		return nil, err
	}
	req, err := validate(ep, form, g.cfg.MaxQueryLength)
	if err != nil {
		return nil, err
	}
	resolve := g.resolver(r.Context(), c.User)
	if ep.query {
		q, err := g.scopeQuery(req.query, c, resolve)
		if err != nil {
			return nil, err
		}
		req.values.Set(pQuery, q)
	}
	if ep.match {
		ms, err := g.scopeMatches(req.matches, c, resolve)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			req.values.Add(pMatch, m)
		}
	}
	path := "/api/v1/" + ep.name
	if label != "" {
		path = "/api/v1/label/" + label + "/values"
	}
	return &upstream{path: path, method: ep.method, form: req.values}, nil
}

// resolver returns the caller's owner values, each source asked at most
// once per request and through the cache.
func (g *Guard) resolver(ctx context.Context, user string) Resolve {
	memo := map[Source][]string{}
	return func(s Source) ([]string, error) {
		if v, ok := memo[s]; ok {
			return v, nil
		}
		var v []string
		var err error
		switch s {
		case SourceUser:
			v = []string{user}
		case SourceProjects, SourceVMs:
			v, err = g.scopes.get(ctx, user, s)
		}
		if err != nil {
			return nil, &Error{http.StatusServiceUnavailable, "unavailable", "the units store cannot say what you own now; try again"}
		}
		memo[s] = v
		return v, nil
	}
}

// scopeQuery parses q and returns what to forward: for an admin the query
// as sent (it parsed), for anyone else the scoped expression, checked
// again after printing and re-parsing.
func (g *Guard) scopeQuery(q string, c Caller, resolve Resolve) (string, error) {
	expr, err := g.parser.ParseExpr(q)
	if err != nil {
		return "", badData("invalid query: %s", clip(err.Error()))
	}
	if c.Admin {
		return q, nil
	}
	if err := g.cfg.Policy.ScopeExpr(expr, resolve); err != nil {
		return "", err
	}
	out := expr.String()
	again, err := g.parser.ParseExpr(out)
	if err != nil {
		return "", g.internal(fmt.Errorf("guard: the scoped query does not parse: %w", err))
	}
	if err := g.cfg.Policy.Check(again, resolve); err != nil {
		return "", g.internal(err)
	}
	return out, nil
}

// scopeMatches parses and scopes match[] selectors. A non-admin who gives
// none (labels, label values) gets one per family they may read, so the
// answer never lists the whole TSDB's label values (every user's name).
func (g *Guard) scopeMatches(ms []string, c Caller, resolve Resolve) ([]string, error) {
	var out []string
	for _, m := range ms {
		sel, err := g.parser.ParseMetricSelector(m)
		if err != nil {
			return nil, badData("invalid match[] %s: %s", clip(m), clip(err.Error()))
		}
		if c.Admin {
			out = append(out, m)
			continue
		}
		if sel, err = g.cfg.Policy.ScopeMatchers(sel, resolve); err != nil {
			return nil, err
		}
		s := (&parser.VectorSelector{LabelMatchers: sel}).String()
		again, err := g.parser.ParseMetricSelector(s)
		if err != nil {
			return nil, g.internal(fmt.Errorf("guard: the scoped selector does not parse: %w", err))
		}
		if err := g.cfg.Policy.CheckMatchers(again, resolve); err != nil {
			return nil, g.internal(err)
		}
		out = append(out, s)
	}
	if len(out) == 0 && !c.Admin {
		var err error
		if out, err = g.familySelectors(resolve); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// familySelectors are a selector per family the caller may read: each
// rule's family with its owner matcher, each public family.
func (g *Guard) familySelectors(resolve Resolve) ([]string, error) {
	p := &g.cfg.Policy
	var out []string
	add := func(re string, owner *labels.Matcher) {
		ms := []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, re)}
		if owner != nil {
			ms = append(ms, owner)
		}
		if p.ClusterLabel != "" {
			ms = append(ms, labels.MustNewMatcher(labels.MatchEqual, p.ClusterLabel, p.Cluster))
		}
		out = append(out, (&parser.VectorSelector{LabelMatchers: ms}).String())
	}
	for _, r := range p.Rules {
		// Each rule's family with that rule's owner matcher; a family
		// that several rules match is narrowed by each in its own
		// selector, which lists only series one rule already allows.
		owner, err := ownerMatcher(r, resolve)
		var e *Error
		if errors.As(err, &e) && e.Status == http.StatusForbidden {
			continue // nothing of this kind is the caller's
		}
		if err != nil {
			return nil, err
		}
		add(r.Family.String(), owner)
	}
	for _, re := range p.Public {
		add(re.String(), nil)
	}
	if len(out) == 0 {
		return nil, forbidden("there is no family you may read")
	}
	return out, nil
}

// internal logs an invariant the guard broke and refuses the query; the
// caller sees a 500 since nothing they sent is wrong.
func (g *Guard) internal(err error) error {
	g.log.Error("refusing a query the guard could not scope safely", "err", err)
	return &Error{http.StatusInternalServerError, "internal", "the guard could not scope this query safely"}
}

// forward sends up to the upstream and copies its answer.
func (g *Guard) forward(ctx context.Context, w http.ResponseWriter, name string, up *upstream) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	u := *g.cfg.Upstream
	u.Path += up.path
	var body io.Reader
	enc := up.form.Encode()
	if up.method == http.MethodGet {
		u.RawQuery = enc
	} else {
		body = strings.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(ctx, up.method, u.String(), body)
	if err != nil {
		g.refuse(w, name, g.internal(fmt.Errorf("guard: building the upstream request: %w", err)))
		return
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Accept", "application/json")
	start := time.Now()
	resp, err := g.client.Do(req)
	g.metrics.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil {
		// The error names the upstream's URL: logged, never answered.
		g.log.Warn("upstream request failed", "endpoint", name, "err", err)
		if errors.Is(err, context.DeadlineExceeded) {
			g.refuse(w, name, &Error{http.StatusServiceUnavailable, "timeout", "the TSDB did not answer in time"})
			return
		}
		if ctx.Err() != nil { // the client went away
			g.metrics.outcome(name, "canceled")
			return
		}
		g.refuse(w, name, &Error{http.StatusBadGateway, "unavailable", "the TSDB cannot be reached"})
		return
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		g.log.Warn("upstream redirected, not followed", "endpoint", name, "status", resp.StatusCode)
		g.refuse(w, name, &Error{http.StatusBadGateway, "unavailable", "the TSDB answered with a redirect"})
		return
	case resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable:
		// A Prometheus 500 is its own failure; its body may name
		// internals, so it is logged and replaced.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		g.log.Warn("upstream failed", "endpoint", name, "status", resp.StatusCode, "body", string(b))
		g.refuse(w, name, &Error{http.StatusBadGateway, "unavailable", fmt.Sprintf("the TSDB failed (status %d)", resp.StatusCode)})
		return
	}
	// Success, and the upstream's own refusals of a scoped query (400
	// bad_data, 422 execution, 503 timeout), as Prometheus wrote them.
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		g.log.Debug("copying the upstream answer", "endpoint", name, "err", err)
	}
	outcome := "ok"
	if resp.StatusCode >= 400 {
		outcome = "upstream_refused"
	}
	g.metrics.outcome(name, outcome)
}

// refuse answers err in Prometheus's error envelope.
func (g *Guard) refuse(w http.ResponseWriter, name string, err error) {
	var e *Error
	if !errors.As(err, &e) {
		g.log.Error("guard error", "err", err)
		e = &Error{http.StatusInternalServerError, "internal", "internal error"}
	}
	g.metrics.outcome(name, outcomeOf(e.Status))
	writeError(w, e.Status, e.Type, e.Msg)
}

func outcomeOf(status int) string {
	switch status {
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return "upstream_error"
	case http.StatusInternalServerError:
		return "internal"
	}
	return "bad_request"
}

// errorEnvelope is Prometheus's error answer.
type errorEnvelope struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorEnvelope{Status: "error", ErrorType: typ, Error: msg})
}
