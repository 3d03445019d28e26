// Package proxy forwards a collector's Redfish power requests to BMCs on a
// management network the collector cannot reach. It forwards only the
// read-only power resources and session handling, and only to BMCs inside
// an allow-list, so it cannot be used as an open relay.
package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config configures a Proxy. Validate with New.
type Config struct {
	// Allow lists the BMCs requests may go to: CIDR networks
	// ("10.20.0.0/16") matched against IP-literal hosts, and host glob
	// patterns ("bmc-*.mgmt.example.com", path.Match syntax) matched
	// against host names. Host names are not resolved: a name must match a
	// pattern itself, so DNS cannot steer the proxy elsewhere.
	Allow []string
	// Nodes maps a node name (sent in NodeHeader) to its BMC base URL,
	// for collectors that should not need to know BMC addresses. Mapped
	// targets must pass Allow too.
	Nodes map[string]string
	// TargetHeader carries the BMC base URL (default X-Redfish-Url);
	// NodeHeader a node name from Nodes (default X-Redfish-Node).
	TargetHeader string
	NodeHeader   string
	// Transport reaches the BMCs (TLS settings); nil means a clone of
	// http.DefaultTransport without an HTTP proxy.
	Transport http.RoundTripper
	// Timeout bounds one forwarded request; default 30s.
	Timeout time.Duration
	// Ports are the TCP ports an allowed host may be reached on; empty
	// means 443 only. Without this an allowed host could be port-scanned
	// through the proxy.
	Ports []int
}

// Proxy is an http.Handler.
type Proxy struct {
	nets   []netip.Prefix
	globs  []string
	nodes  map[string]*url.URL
	target string
	node   string
	client *http.Client
	ports  map[int]bool
}

var (
	seg = `[A-Za-z0-9_][A-Za-z0-9_.\-]*`
	// allowed is every forwarded request: method and path.
	allowed = []struct {
		method string
		re     *regexp.Regexp
	}{
		{http.MethodGet, regexp.MustCompile(`^/redfish/v1/Chassis$`)},
		{http.MethodGet, regexp.MustCompile(`^/redfish/v1/Chassis/` + seg + `$`)},
		{http.MethodGet, regexp.MustCompile(`^/redfish/v1/Chassis/` + seg + `/(Power|EnvironmentMetrics)$`)},
		{http.MethodGet, regexp.MustCompile(`^/redfish/v1/Chassis/` + seg + `/Sensors/` + seg + `$`)},
		{http.MethodGet, regexp.MustCompile(`^/redfish/v1/Chassis/` + seg + `/PowerSubsystem(/PowerSupplies(/` + seg + `(/Metrics)?)?)?$`)},
		{http.MethodPost, regexp.MustCompile(`^/redfish/v1/SessionService/Sessions$`)},
		{http.MethodDelete, regexp.MustCompile(`^/redfish/v1/SessionService/Sessions/` + seg + `$`)},
	}
	// forwardedReq and forwardedResp are the headers passed through;
	// everything else (cookies, the target header, hop-by-hop) stays.
	forwardedReq  = []string{"Accept", "Content-Type", "OData-Version", "X-Auth-Token", "Authorization"}
	forwardedResp = []string{"Content-Type", "X-Auth-Token", "Location", "OData-Version", "ETag"}
)

const maxBody = 4 << 20

// New validates cfg.
func New(cfg Config) (*Proxy, error) {
	p := &Proxy{target: cfg.TargetHeader, node: cfg.NodeHeader, nodes: map[string]*url.URL{}}
	if p.target == "" {
		p.target = "X-Redfish-Url"
	}
	if p.node == "" {
		p.node = "X-Redfish-Node"
	}
	if len(cfg.Allow) == 0 {
		return nil, errors.New("proxy allow: at least one CIDR or host pattern is required")
	}
	for _, a := range cfg.Allow {
		if strings.Contains(a, "/") {
			pf, err := netip.ParsePrefix(a)
			if err != nil {
				return nil, fmt.Errorf("proxy allow: %q: %w", a, err)
			}
			p.nets = append(p.nets, pf.Masked())
			continue
		}
		if _, err := path.Match(a, ""); err != nil || a == "" || a == "*" {
			return nil, fmt.Errorf("proxy allow: %q is not a usable host pattern", a)
		}
		p.globs = append(p.globs, strings.ToLower(a))
	}
	p.ports = map[int]bool{}
	for _, port := range cfg.Ports {
		if port < 1 || port > 65535 {
			return nil, fmt.Errorf("proxy allow-port: %d is not a TCP port", port)
		}
		p.ports[port] = true
	}
	if len(p.ports) == 0 {
		p.ports[443] = true
	}
	for n, raw := range cfg.Nodes {
		u, err := parseTarget(raw)
		if err != nil {
			return nil, fmt.Errorf("proxy nodes: %s: %w", n, err)
		}
		if !p.allowedHost(u.Hostname()) {
			return nil, fmt.Errorf("proxy nodes: %s: %s is outside the allow list", n, u.Host)
		}
		if !p.allowedPort(u) {
			return nil, fmt.Errorf("proxy nodes: %s: port %s is not an allowed port", n, port(u))
		}
		p.nodes[n] = u
	}
	tr := cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		tr = t
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	p.client = &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return p, nil
}

// parseTarget accepts only a scheme and host (and port): the path comes
// from the request, never from the header.
func parseTarget(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL", raw)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("%q: scheme must be http or https", raw)
	}
	if u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q: want scheme://host[:port] only", raw)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

func (p *Proxy) allowedHost(host string) bool {
	if addr, err := netip.ParseAddr(host); err == nil {
		addr = addr.Unmap()
		for _, n := range p.nets {
			if n.Contains(addr) {
				return true
			}
		}
		return false
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, g := range p.globs {
		if ok, _ := path.Match(g, host); ok {
			return true
		}
	}
	return false
}

// port is u's TCP port, the scheme's default when it names none.
func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "http" {
		return "80"
	}
	return "443"
}

func (p *Proxy) allowedPort(u *url.URL) bool {
	n, err := strconv.Atoi(port(u))
	return err == nil && p.ports[n]
}

func allowedRequest(method, p string) bool {
	for _, a := range allowed {
		if a.method == method && a.re.MatchString(p) {
			return true
		}
	}
	return false
}

// ServeHTTP forwards one allowed request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The raw path must be the clean path: no "..", no "//", no
	// percent-encoding that would decode to something else upstream.
	if r.URL.RawPath != "" || path.Clean(r.URL.Path) != r.URL.Path || r.URL.RawQuery != "" ||
		!allowedRequest(r.Method, r.URL.Path) {
		http.Error(w, fmt.Sprintf("forbidden: %s %s is not an allowed Redfish power request", r.Method, r.URL.EscapedPath()), http.StatusForbidden)
		return
	}
	var target *url.URL
	switch t, n := r.Header.Get(p.target), r.Header.Get(p.node); {
	case t != "":
		u, err := parseTarget(t)
		if err != nil {
			http.Error(w, fmt.Sprintf("bad request: %s: %v", p.target, err), http.StatusBadRequest)
			return
		}
		target = u
	case n != "":
		u, ok := p.nodes[n]
		if !ok {
			http.Error(w, fmt.Sprintf("forbidden: node %q is not in the node map", n), http.StatusForbidden)
			return
		}
		target = u
	default:
		http.Error(w, fmt.Sprintf("bad request: missing %s (or %s) header naming the BMC", p.target, p.node), http.StatusBadRequest)
		return
	}
	if !p.allowedHost(target.Hostname()) {
		http.Error(w, fmt.Sprintf("forbidden: BMC %s is outside the allow list", target.Host), http.StatusForbidden)
		return
	}
	if !p.allowedPort(target) {
		http.Error(w, fmt.Sprintf("forbidden: port %s is not an allowed BMC port", port(target)), http.StatusForbidden)
		return
	}

	var body io.Reader
	if r.Method == http.MethodPost {
		b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil {
			http.Error(w, "bad request: reading body", http.StatusBadRequest)
			return
		}
		body = bytes.NewReader(b)
	}
	up := *target
	up.Path = r.URL.Path
	req, err := http.NewRequestWithContext(r.Context(), r.Method, up.String(), body)
	if err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	for _, h := range forwardedReq {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var ne net.Error
		status := http.StatusBadGateway
		if errors.As(err, &ne) && ne.Timeout() {
			status = http.StatusGatewayTimeout
		}
		// The transport's error can quote what the far end sent (a
		// service banner in a "malformed HTTP response"): say only what
		// kind of failure it was.
		msg := "unreachable"
		if status == http.StatusGatewayTimeout {
			msg = "timed out"
		}
		http.Error(w, fmt.Sprintf("BMC %s: %s", target.Host, msg), status)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		// Error bodies are never echoed: whatever answers on an allowed
		// host must not be read through the proxy. The status is enough
		// for the client (401 re-login, 404 re-discovery).
		for _, h := range []string{"OData-Version"} {
			if v := resp.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		http.Error(w, fmt.Sprintf("BMC %s answered HTTP %d", target.Host, resp.StatusCode), resp.StatusCode)
		return
	}
	for _, h := range forwardedResp {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, maxBody))
}
