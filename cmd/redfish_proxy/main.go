// Command redfish_proxy forwards wattrace's Redfish power requests to BMCs
// on a management network; see docs/meters.md.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wattrace/wattrace/pkg/power/redfish/proxy"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "redfish_proxy:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("redfish_proxy", flag.ContinueOnError)
	var allow, ports listFlag
	listen := fs.String("listen", ":9842", "address to listen on")
	fs.Var(&allow, "allow", "BMC allowed as a target: CIDR (10.0.0.0/16) or host pattern (bmc-*.mgmt); repeatable, required")
	fs.Var(&ports, "allow-port", "TCP port an allowed BMC may be reached on; repeatable (default 443 only)")
	nodesFile := fs.String("nodes-file", "", "JSON object mapping node names to BMC base URLs, used when a request names a node (X-Redfish-Node)")
	certFile := fs.String("tls-cert", "", "serve HTTPS with this certificate (with --tls-key)")
	keyFile := fs.String("tls-key", "", "key for --tls-cert")
	caFile := fs.String("bmc-ca-file", "", "PEM bundle to verify BMC certificates")
	insecure := fs.Bool("bmc-insecure-skip-verify", false, "do not verify BMC certificates (self-signed BMCs)")
	timeout := fs.Duration("bmc-timeout", 30*time.Second, "timeout of one request to a BMC")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := proxy.Config{Allow: allow, Timeout: *timeout}
	for _, p := range ports {
		n, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("--allow-port: %q is not a port number", p)
		}
		cfg.Ports = append(cfg.Ports, n)
	}
	if *nodesFile != "" {
		b, err := os.ReadFile(*nodesFile)
		if err != nil {
			return fmt.Errorf("--nodes-file: %w", err)
		}
		if err := json.Unmarshal(b, &cfg.Nodes); err != nil {
			return fmt.Errorf("--nodes-file %s: %w", *nodesFile, err)
		}
	}
	if *caFile != "" && *insecure {
		return errors.New("--bmc-ca-file and --bmc-insecure-skip-verify: set one")
	}
	tc := &tls.Config{InsecureSkipVerify: *insecure, MinVersion: tls.VersionTLS12} //nolint:gosec // opt-in for self-signed BMCs
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return fmt.Errorf("--bmc-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--bmc-ca-file: %s holds no PEM certificate", *caFile)
		}
		tc.RootCAs = pool
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy, tr.TLSClientConfig = nil, tc
	cfg.Transport = tr
	p, err := proxy.New(cfg)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv := &http.Server{
		Addr:              *listen,
		Handler:           logRequests(log, p),
		ReadHeaderTimeout: 10 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		log.Info("listening", "address", *listen, "allow", allow.String())
		if *certFile != "" {
			errc <- srv.ListenAndServeTLS(*certFile, *keyFile)
		} else {
			errc <- srv.ListenAndServe()
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(c int) { s.status = c; s.ResponseWriter.WriteHeader(c) }

// logRequests logs method, path, target and status; never headers, which
// carry tokens and credentials.
func logRequests(log *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		h.ServeHTTP(sw, r)
		log.Info("request", "method", r.Method, "path", r.URL.EscapedPath(), "target", r.Header.Get("X-Redfish-Url"),
			"node", r.Header.Get("X-Redfish-Node"), "status", sw.status, "duration", time.Since(start))
	})
}
