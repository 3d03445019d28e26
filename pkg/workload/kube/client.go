// Package kube maps Kubernetes pod uids and container ids, as cgroup paths
// carry them, to pod, namespace and container names.
//
// The source is the kubelet's /pods endpoint: a PodList of this node's pods
// with metadata.uid and status.containerStatuses[].containerID, exactly the
// mapping needed. It is node-local (no cluster-wide watch, no load on the
// API server from every node), needs no client-go, and knows static pods by
// the uid their cgroups carry. The pod-resources gRPC API has neither pod
// uids nor container ids; an API-server watch needs client-go. The same
// code reads the API server's /api/v1/pods?fieldSelector=spec.nodeName=<node>
// where the kubelet port is closed (static pods are then matched through
// their mirror annotation).
//
// Access: HTTPS on the kubelet's port 10250 with a service-account bearer
// token; the kubelet authorises GET /pods as the nodes/proxy subresource,
// which also opens the kubelet's other endpoints, so grant it to this
// service account only. The read-only port 10255 needs no token but is
// off in kubeadm clusters and most managed ones.
package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Pod is one pod as the kubelet reports it.
type Pod struct {
	UID, Name, Namespace string
	QoS                  string // guaranteed, burstable, besteffort
	// Containers by id (without the runtime:// prefix): current and
	// previous instances of regular, init and ephemeral containers. The
	// sandbox is not among them: the kubelet does not report its id.
	Containers map[string]Container
}

// Container is one container of a pod.
type Container struct {
	Name    string
	Runtime string // containerd, crio, docker
}

// Config configures a Client.
type Config struct {
	// URL of the pod list, e.g. https://$NODE_IP:10250/pods or
	// http://127.0.0.1:10255/pods.
	URL string
	// TokenFile holds the bearer token. It is re-read before each request:
	// projected service-account tokens rotate. Empty sends none.
	TokenFile string
	// CAFile verifies the kubelet's serving certificate. Kubelets often
	// serve a self-signed one, hence InsecureSkipVerify.
	CAFile             string
	InsecureSkipVerify bool
	// Refresh is the period of background refreshes (default 30s).
	Refresh time.Duration
	// MinRefresh bounds how often a lookup of an unknown pod may trigger a
	// refresh (default 5s).
	MinRefresh time.Duration
	// Timeout bounds one request (default 10s).
	Timeout time.Duration
	// MaxBytes bounds the response (default 64 MiB).
	MaxBytes int64
	// HTTPClient replaces the client built from the TLS settings.
	HTTPClient *http.Client
}

// Status describes the client's health, for metrics and logs.
type Status struct {
	Pods        int
	Refreshes   uint64 // successful
	Errors      uint64 // failed
	LastSuccess time.Time
	LastError   error // of the latest failed refresh since the last success; nil after a success
}

// Client caches the pod list and refreshes it in the background. Lookups
// never wait for the network. Safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
	now  func() time.Time

	pods atomic.Pointer[map[string]Pod]
	kick chan struct{}

	mu     sync.Mutex // guards status
	status Status
}

// New validates cfg and returns a client with an empty cache; Run fills it.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("kube: empty pod list URL")
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 30 * time.Second
	}
	if cfg.MinRefresh <= 0 {
		cfg.MinRefresh = 5 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 64 << 20
	}
	hc := cfg.HTTPClient
	if hc == nil {
		// InsecureSkipVerify is opt-in: see Config.
		tc := &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fmt.Errorf("kube: read CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kube: no certificate in %s", cfg.CAFile)
			}
			tc.RootCAs = pool
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		hc = &http.Client{Transport: tr}
	}
	c := &Client{cfg: cfg, http: hc, now: time.Now, kick: make(chan struct{}, 1)}
	empty := map[string]Pod{}
	c.pods.Store(&empty)
	return c, nil
}

// Pod returns the pod with this uid from the cache. An unknown uid asks the
// background loop for a refresh (at most once per MinRefresh) and returns
// false at once.
func (c *Client) Pod(uid string) (Pod, bool) {
	p, ok := (*c.pods.Load())[uid]
	if !ok {
		select {
		case c.kick <- struct{}{}:
		default: // a refresh is already requested
		}
	}
	return p, ok
}

// Status returns the refresh counters.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.status
	s.Pods = len(*c.pods.Load())
	return s
}

// Run refreshes the cache at once, then every Refresh and on request, until
// ctx ends. Failures keep the previous list: pods known a minute ago are
// better names than none.
func (c *Client) Run(ctx context.Context) {
	tick := time.NewTicker(c.cfg.Refresh)
	defer tick.Stop()
	var last time.Time
	var delayed <-chan time.Time
	refresh := func() {
		last = c.now()
		delayed = nil
		c.refresh(ctx)
	}
	refresh()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			refresh()
		case <-delayed:
			refresh()
		case <-c.kick:
			if wait := c.cfg.MinRefresh - c.now().Sub(last); wait > 0 {
				if delayed == nil {
					delayed = time.After(wait)
				}
				continue
			}
			refresh()
		}
	}
}

func (c *Client) refresh(ctx context.Context) {
	pods, err := c.fetch(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down; not the kubelet's fault
		}
		c.status.Errors++
		c.status.LastError = err
		return
	}
	c.pods.Store(&pods)
	c.status.Refreshes++
	c.status.LastSuccess = c.now()
	c.status.LastError = nil
}

func (c *Client) fetch(ctx context.Context) (map[string]Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("kube: build request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.TokenFile != "" {
		tok, err := os.ReadFile(c.cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("kube: read token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kube: get pods: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("kube: get pods: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	pods, err := decodePods(io.LimitReader(resp.Body, c.cfg.MaxBytes))
	if err != nil {
		return nil, fmt.Errorf("kube: %s: %w", c.cfg.URL, err)
	}
	return pods, nil
}
