package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/units/updater"
)

// The keys of the TSDB the updater reads.
const (
	KeyTSDBURL        = "tsdb.url"
	KeyTSDBHTTPConfig = "tsdb.http-config-file"
	KeyTSDBTimeout    = "tsdb.timeout"
)

// TSDB is the Prometheus-compatible query API the updater reads.
type TSDB struct {
	URL string
	// HTTPConfigFile is a Prometheus HTTP client configuration (basic
	// auth, bearer token, TLS, extra headers such as X-Scope-OrgID).
	HTTPConfigFile string
	Timeout        time.Duration
}

// Declare declares tsdb.*, bound to c.
func (c *TSDB) Declare(s *setting.Set) {
	s.String(&c.URL, KeyTSDBURL, "", "Base URL of the Prometheus-compatible query API holding the exporters' series (Prometheus, VictoriaMetrics, Thanos, Mimir's /prometheus). Required.").Checked(func() error {
		if c.URL == "" {
			return setting.Invalid(KeyTSDBURL, "", "the TSDB's query API URL is required")
		}
		if !httpURL(c.URL) {
			return setting.Invalid(KeyTSDBURL, c.URL, "want an http(s) URL")
		}
		return nil
	})
	s.String(&c.HTTPConfigFile, KeyTSDBHTTPConfig, "", "Prometheus HTTP client configuration for the TSDB (basic_auth, authorization, tls_config, http_headers).")
	s.AnyDuration(&c.Timeout, KeyTSDBTimeout, 2*time.Minute, "Timeout of one TSDB query.").Checked(positive(KeyTSDBTimeout, &c.Timeout))
}

// httpURL reports whether s is an absolute http or https URL with a host.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// positive refuses a duration of 0 or less.
func positive(key string, d *time.Duration) func() error {
	return func() error {
		if *d <= 0 {
			return setting.Invalid(key, *d, "must be positive")
		}
		return nil
	}
}

// timeoutQuerier bounds each TSDB query.
type timeoutQuerier struct {
	v1.API
	timeout time.Duration
}

func (q timeoutQuerier) Query(ctx context.Context, query string, ts time.Time, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	ctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	return q.API.Query(ctx, query, ts, opts...)
}

func newQuerier(c TSDB) (updater.Querier, error) {
	rt := api.DefaultRoundTripper
	if c.HTTPConfigFile != "" {
		hc, _, err := promconfig.LoadHTTPConfigFile(c.HTTPConfigFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", KeyTSDBHTTPConfig, err)
		}
		if rt, err = promconfig.NewRoundTripperFromConfig(*hc, "wattrace-api"); err != nil {
			return nil, fmt.Errorf("%s: %w", KeyTSDBHTTPConfig, err)
		}
	}
	client, err := api.NewClient(api.Config{Address: c.URL, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyTSDBURL, err)
	}
	return timeoutQuerier{API: v1.NewAPI(client), timeout: c.Timeout}, nil
}
