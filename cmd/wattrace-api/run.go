package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	oklog "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/cli"
	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/units/feed"
	"github.com/wattrace/wattrace/internal/units/pbs"
	"github.com/wattrace/wattrace/internal/units/slurm"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/internal/units/updater"
)

// server is the wired program: every part built, nothing running yet.
type server struct {
	cfg     *Config
	log     *zap.Logger
	store   *store.Store
	updater *updater.Updater
	feeder  *feed.Feeder // nil without Slurm
	pbs     *feed.Feeder // nil without PBS
	handler http.Handler
	lns     []net.Listener
	web     *webConfig
}

// build opens the store, the TSDB client and the Slurm source, and binds
// the listen addresses, so a bad setting stops start-up naming its key.
func build(ctx context.Context, cfg *Config, log *zap.Logger) (*server, error) {
	s := &server{cfg: cfg, log: log}
	for _, addr := range cfg.Web.ListenAddresses {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("%s %q: %w", KeyWebListenAddress, addr, err)
		}
		s.lns = append(s.lns, l)
	}
	st, err := store.Open(ctx, cfg.Store.Config)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("%s: %w", cfg.Store.Key(), err)
	}
	s.store = st
	q, err := newQuerier(cfg.TSDB)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.updater, err = updater.New(q, st, cfg.Updater, log.Named("updater"))
	if err != nil {
		s.Close()
		return nil, err
	}
	src, err := cfg.Slurm.Open(cfg.Cluster)
	if err != nil {
		s.Close()
		return nil, err
	}
	if src != nil {
		s.feeder = slurm.NewFeeder(src, st, cfg.Slurm.Interval, cfg.Slurm.Lookback, log.Named("slurm"))
		log.Info("reading Slurm job metadata", zap.String("source", src.Name()), zap.Duration("interval", cfg.Slurm.Interval))
	}
	src, err = cfg.PBS.Open(cfg.Cluster)
	if err != nil {
		s.Close()
		return nil, err
	}
	if src != nil {
		s.pbs = pbs.NewFeeder(src, st, cfg.PBS.Interval, cfg.PBS.Lookback, log.Named("pbs"))
		log.Info("reading PBS job metadata", zap.String("source", src.Name()), zap.Duration("interval", cfg.PBS.Interval))
	}
	if s.web, err = loadWebConfig(cfg.Web.ConfigFile); err != nil {
		s.Close()
		return nil, err
	}
	s.handler, err = s.routes()
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// routes serves /metrics (the server's own) and the API.
func (s *server) routes() (http.Handler, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&selfCollector{u: s.updater})
	deps := apiDeps{Reader: s.store, Access: s.cfg.API, Identity: s.cfg.Identity,
		BasicUsers: s.web.Users, Updater: s.updater, Log: cli.SlogLogger(s.log, "api")}
	acc, err := newAccess(deps)
	if err != nil {
		return nil, err
	}
	deps.Built = acc
	apiHandler, err := newAPIHandler(deps)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", apiHandler)
	if err := s.mountGuard(mux, reg, acc); err != nil {
		return nil, err
	}
	return mux, nil
}

// Close releases what build opened.
func (s *server) Close() {
	for _, l := range s.lns {
		_ = l.Close()
	}
	if s.store != nil {
		_ = s.store.Close()
	}
	s.web.Close()
}

// run builds the server and runs its parts until ctx ends or one fails.
func run(ctx context.Context, cfg *Config, log *zap.Logger) error {
	s, err := build(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.run(ctx)
}

func (s *server) run(ctx context.Context) error {
	var g oklog.Group
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { <-ctx.Done(); return nil }, func(error) { cancel() })
	}
	loop := func(name string, f func(context.Context) error) {
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return f(ctx) }, func(error) { cancel() })
		s.log.Debug("started", zap.String("part", name))
	}
	loop("updater", s.updater.Run)
	if s.feeder != nil {
		loop("slurm", s.feeder.Run)
	}
	if s.pbs != nil {
		loop("pbs", s.pbs.Run)
	}
	loop("housekeeping", s.housekeeping)
	systemd := false
	// exporter-toolkit does TLS only: the basic-auth users are the API's
	// (webConfig).
	flags := &web.FlagConfig{WebListenAddresses: &s.cfg.Web.ListenAddresses, WebSystemdSocket: &systemd, WebConfigFile: &s.web.ToolkitPath}
	wlog := cli.SlogLogger(s.log, "web")
	for _, l := range s.lns {
		srv := newHTTPServer(s.handler, s.cfg.Timeouts)
		g.Add(func() error {
			if err := web.Serve(l, srv, flags, wlog); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("web: %w", err)
			}
			return nil
		}, func(error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
	}
	s.log.Info("wattrace-api started", zap.Strings("listen", s.cfg.Web.ListenAddresses),
		zap.String("store", s.cfg.Store.Driver), zap.String("tsdb", s.cfg.TSDB.URL))
	return g.Run()
}

// The HTTP server's timeouts.
const (
	KeyWebReadHeaderTimeout = "web.read-header-timeout"
	KeyWebReadTimeout       = "web.read-timeout"
	KeyWebWriteTimeout      = "web.write-timeout"
	KeyWebIdleTimeout       = "web.idle-timeout"
)

// Timeouts bound every HTTP connection, so an idle or half-sent request
// cannot hold a connection (and a goroutine) open.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// Declare declares web.*-timeout, bound to t; each must be positive.
func (t *Timeouts) Declare(s *setting.Set) {
	bounded := func(key string, d *time.Duration) func() error {
		return func() error {
			if *d <= 0 {
				return setting.Invalid(key, *d, "must be positive: without it a client can hold a connection open forever")
			}
			return nil
		}
	}
	s.AnyDuration(&t.ReadHeader, KeyWebReadHeaderTimeout, 10*time.Second, "Time to read a request's headers.").Checked(bounded(KeyWebReadHeaderTimeout, &t.ReadHeader)).Checked(func() error {
		if t.ReadHeader > t.Read && t.Read > 0 {
			return setting.Invalid(KeyWebReadHeaderTimeout, t.ReadHeader, "at most "+KeyWebReadTimeout)
		}
		return nil
	})
	s.AnyDuration(&t.Read, KeyWebReadTimeout, 30*time.Second, "Time to read a whole request.").Checked(bounded(KeyWebReadTimeout, &t.Read))
	s.AnyDuration(&t.Write, KeyWebWriteTimeout, 5*time.Minute, "Time to write an answer (a year of units is large).").Checked(bounded(KeyWebWriteTimeout, &t.Write))
	s.AnyDuration(&t.Idle, KeyWebIdleTimeout, 60*time.Second, "Time an idle keep-alive connection, or one with part of its next request, stays open.").Checked(bounded(KeyWebIdleTimeout, &t.Idle))
}

// newHTTPServer bounds every phase of a connection: reading the headers,
// the whole request, writing the answer, and waiting idle for the next
// request. Without IdleTimeout (or ReadTimeout, its fallback) a kept-alive
// connection, or one holding the first bytes of its next request, stays
// open for ever.
func newHTTPServer(h http.Handler, t Timeouts) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write, IdleTimeout: t.Idle}
}

// housekeeping applies retention daily and takes SQLite backups.
func (s *server) housekeeping(ctx context.Context) error {
	prune := time.NewTicker(24 * time.Hour)
	defer prune.Stop()
	var backup <-chan time.Time
	if s.cfg.Store.BackupDir != "" {
		t := time.NewTicker(s.cfg.Store.BackupInterval)
		defer t.Stop()
		backup = t.C
	}
	s.retention(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-prune.C:
			s.retention(ctx)
		case <-backup:
			if path, err := s.backup(ctx, time.Now()); err != nil {
				s.log.Warn("online backup failed", zap.Error(err))
			} else {
				s.log.Info("online backup written", zap.String("path", path))
			}
		}
	}
}

func (s *server) retention(ctx context.Context) {
	if s.cfg.Store.Retention <= 0 {
		return
	}
	n, err := s.store.Prune(ctx, time.Now().Add(-s.cfg.Store.Retention))
	if err != nil {
		s.log.Warn("applying retention failed", zap.Error(err))
	} else if n > 0 {
		s.log.Info("retention deleted units", zap.Int64("units", n))
	}
}

// backup writes units-<time>.db into the backup directory and deletes the
// oldest beyond store.backup.keep.
func (s *server) backup(ctx context.Context, now time.Time) (string, error) {
	dir := s.cfg.Store.BackupDir
	path := filepath.Join(dir, "units-"+now.UTC().Format("20060102T150405Z")+".db")
	if err := s.store.Backup(ctx, path); err != nil {
		return "", err
	}
	old, err := filepath.Glob(filepath.Join(dir, "units-*.db"))
	if err != nil {
		return path, err
	}
	sort.Strings(old) // the time stamp sorts by age
	for len(old) > s.cfg.Store.BackupKeep {
		if strings.HasPrefix(filepath.Base(old[0]), "units-") {
			if err := os.Remove(old[0]); err != nil {
				return path, err
			}
		}
		old = old[1:]
	}
	return path, nil
}
