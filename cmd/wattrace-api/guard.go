package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/common/config"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/cli"
	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/units/access"
	"github.com/wattrace/wattrace/internal/units/guard"
	"github.com/wattrace/wattrace/pkg/units"
)

// The query guard's keys (internal/units/guard), served under /tsdb/.
const (
	KeyGuardUpstream       = "guard.upstream"
	KeyGuardHTTPConfig     = "guard.http-config-file"
	KeyGuardPublic         = "guard.public"
	KeyGuardFamilies       = "guard.families"
	KeyGuardClusterLabel   = "guard.cluster-label"
	KeyGuardMaxQueryLength = "guard.max-query-length"
	KeyGuardTimeout        = "guard.timeout"
	KeyGuardScopesTTL      = "guard.scopes-ttl"
)

// GuardPrefix is where the guard is served: Grafana's Prometheus data
// source URL is http://api:9842/tsdb.
const GuardPrefix = "/tsdb"

// Guard configures the query guard; it is off while Upstream is empty.
type Guard struct {
	Upstream       string
	HTTPConfigFile string
	Public         []string
	Families       []string
	ClusterLabel   string
	MaxQueryLength int
	Timeout        time.Duration
	ScopesTTL      time.Duration

	// Parsed by the checks, for mountGuard.
	upstream *url.URL
	rules    []guard.Rule
	public   []*regexp.Regexp
}

// Declare declares guard.*, bound to g. The guard's values are checked
// only while it is on (guard.upstream set); the checks keep what they
// parse for mountGuard.
func (g *Guard) Declare(s *setting.Set) {
	s.String(&g.Upstream, KeyGuardUpstream, "", "Base URL of the query API the guard serves under /tsdb (Prometheus, Thanos, Mimir's /prometheus, VictoriaMetrics); usually tsdb.url. Empty: no guard.").Checked(g.whileOn(func() error {
		u, err := url.Parse(g.Upstream)
		if err != nil {
			return setting.Invalid(KeyGuardUpstream, "", "not a URL") // its text may hold a password
		}
		g.upstream = u
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
			return setting.Invalid(KeyGuardUpstream, u.Redacted(), "want an http(s) URL without credentials or query (credentials go in guard.http-config-file)")
		}
		return nil
	}))
	s.String(&g.HTTPConfigFile, KeyGuardHTTPConfig, "", "Prometheus HTTP client configuration for the guard's upstream (basic_auth, authorization, tls_config, http_headers).")
	s.Strings(&g.Public, KeyGuardPublic, nil, "Metric families (regexes on the name, e.g. wattrace_node_.*) every user may read unscoped. Repeatable.").Checked(g.whileOn(func() error {
		pub, err := guard.ParsePublic(g.Public)
		if err != nil {
			return setting.Invalid(KeyGuardPublic, strings.Join(g.Public, ","), err.Error())
		}
		g.public = pub
		return nil
	}))
	s.Strings(&g.Families, KeyGuardFamilies, guard.DefaultRules(), "Owned families, each FAMILY_REGEX=LABEL:SOURCE (source user, projects or vms): a non-admin's selectors of the family get LABEL matched to their SOURCE. Repeatable; replaces the default table.").Checked(g.whileOn(func() error {
		g.rules = nil
		var errs []error
		for _, f := range g.Families {
			r, err := guard.ParseRule(f)
			if err != nil {
				errs = append(errs, setting.Invalid(KeyGuardFamilies, f, err.Error()))
				continue
			}
			g.rules = append(g.rules, r)
		}
		return errors.Join(errs...)
	}))
	s.String(&g.ClusterLabel, KeyGuardClusterLabel, "", "Label matched to the cluster setting on every non-admin selector (e.g. an external label). Empty: none.").Checked(g.whileOn(func() error {
		if g.ClusterLabel != "" && !guard.ValidLabelName(g.ClusterLabel) {
			return setting.Invalid(KeyGuardClusterLabel, g.ClusterLabel, "not a label name")
		}
		return nil
	}))
	s.AnyInt(&g.MaxQueryLength, KeyGuardMaxQueryLength, guard.DefaultMaxQueryLength, "Longest query or match[] selector the guard accepts, in bytes.").Checked(g.whileOn(func() error {
		if g.MaxQueryLength < 64 || g.MaxQueryLength > 1<<20 {
			return setting.Invalid(KeyGuardMaxQueryLength, g.MaxQueryLength, "between 64 and 1048576")
		}
		return nil
	}))
	s.AnyDuration(&g.Timeout, KeyGuardTimeout, guard.DefaultTimeout, "Timeout of one request to the guard's upstream.").Checked(g.whileOn(positive(KeyGuardTimeout, &g.Timeout)))
	s.AnyDuration(&g.ScopesTTL, KeyGuardScopesTTL, guard.DefaultScopesTTL, "How long a user's projects and VMs (from the units store) are cached by the guard.").Checked(g.whileOn(positive(KeyGuardScopesTTL, &g.ScopesTTL)))
}

// whileOn runs check only while the guard is on.
func (g *Guard) whileOn(check func() error) func() error {
	return func() error {
		if g.Upstream == "" {
			return nil
		}
		return check()
	}
}

// mountGuard serves the guard under GuardPrefix when guard.upstream is
// set: behind the API's listener, so it shares its web configuration
// (TLS), its access control (acc, the API's own) and the store.
func (s *server) mountGuard(mux *http.ServeMux, reg prometheus.Registerer, acc *access.Access) error {
	c := s.cfg.Guard
	if c.Upstream == "" {
		return nil
	}
	rt := http.DefaultTransport
	if c.HTTPConfigFile != "" {
		hc, _, err := promconfig.LoadHTTPConfigFile(c.HTTPConfigFile)
		if err != nil {
			return fmt.Errorf("%s: %w", KeyGuardHTTPConfig, err)
		}
		if rt, err = promconfig.NewRoundTripperFromConfig(*hc, "wattrace-api-guard"); err != nil {
			return fmt.Errorf("%s: %w", KeyGuardHTTPConfig, err)
		}
	}
	g, err := guard.New(guard.Config{
		Upstream: c.upstream, Transport: rt,
		Policy:         guard.Policy{Rules: c.rules, Public: c.public, ClusterLabel: c.ClusterLabel, Cluster: s.cfg.Cluster},
		MaxQueryLength: c.MaxQueryLength, Timeout: c.Timeout, ScopesTTL: c.ScopesTTL,
		Identifier: guard.IdentifierFunc(func(r *http.Request) (guard.Caller, error) {
			c, err := acc.Identify(r)
			return guard.Caller{User: c.User, Admin: c.Admin}, err
		}),
		Scopes:     storeScopes{r: s.store, cluster: s.cfg.Cluster},
		Registerer: reg,
		Log:        cli.SlogLogger(s.log, "guard"),
	})
	if err != nil {
		return fmt.Errorf("%s: %w", KeyGuardUpstream, err)
	}
	mux.Handle(GuardPrefix+"/", http.StripPrefix(GuardPrefix, g))
	s.log.Info("query guard serving "+GuardPrefix+"/api/v1/", zap.String("upstream", c.upstream.Redacted()),
		zap.Int("families", len(c.rules)), zap.Int("public", len(c.public)))
	return nil
}

// storeScopes answers the guard's Scopes from the units store, for this
// cluster's units.
type storeScopes struct {
	r       units.Reader
	cluster string
}

// Projects are the projects the store has seen the user in.
func (s storeScopes) Projects(ctx context.Context, user string) ([]string, error) {
	us, err := s.r.Users(ctx, units.Membership{Users: []string{user}, Clusters: []string{s.cluster}})
	if err != nil {
		return nil, fmt.Errorf("projects of %s: %w", user, err)
	}
	var out []string
	for _, u := range us {
		if u.Name == user {
			out = append(out, u.Projects...)
		}
	}
	return out, nil
}

// VMs are the ids of the user's VM units, running or ended (a dashboard
// may look at last month).
func (s storeScopes) VMs(ctx context.Context, user string) ([]string, error) {
	us, err := s.r.Units(ctx, units.Filter{Users: []string{user}, Clusters: []string{s.cluster},
		Kinds: []units.Kind{units.KindVM}, Fields: []string{"id"}, Limit: units.MaxLimit})
	if err != nil {
		return nil, fmt.Errorf("VMs of %s: %w", user, err)
	}
	out := make([]string, 0, len(us))
	for _, u := range us {
		out = append(out, u.ID)
	}
	return out, nil
}
