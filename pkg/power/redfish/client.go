package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// SessionsPath is where Redfish sessions are created (DSP0266 §13.3).
const SessionsPath = "/redfish/v1/SessionService/Sessions"

// maxBody bounds what we read from a BMC (or a proxy posing as one).
const maxBody = 4 << 20

// ErrAuth marks authentication failures (wrong credentials, a locked
// account): retrying with the same credentials will not help.
var ErrAuth = errors.New("authentication failed")

// Client talks to one BMC, directly or through a proxy. It logs in lazily
// and again whenever the BMC answers 401 (the session expired or was
// revoked). Safe for concurrent use.
type Client struct {
	bmc     *url.URL // the BMC's base URL
	ext     *url.URL // proxy base URL, nil when direct
	header  string
	http    *http.Client
	user    string
	pass    string
	session bool

	mu         sync.Mutex
	token      string
	sessionURI string // Location of our session, for logout
	logins     int
}

// NewClient validates cfg and resolves its credentials.
func NewClient(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bmc, err := cfg.bmcURL()
	if err != nil {
		return nil, err
	}
	hc, err := cfg.httpClient()
	if err != nil {
		return nil, err
	}
	user, pass, err := cfg.credentials()
	if err != nil {
		return nil, err
	}
	c := &Client{bmc: bmc, http: hc, user: user, pass: pass, session: cfg.Auth != "basic", header: cfg.ExternalHeader}
	if c.header == "" {
		c.header = DefaultExternalHeader
	}
	if cfg.ExternalURL != "" {
		if c.ext, err = url.Parse(cfg.ExternalURL); err != nil {
			return nil, fmt.Errorf("redfish.external-url: %w", err)
		}
	}
	return c, nil
}

// BMC is the BMC's base URL (after {hostname} replacement).
func (c *Client) BMC() string { return c.bmc.String() }

// Logins counts the sessions created so far.
func (c *Client) Logins() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logins
}

// newRequest addresses path on the BMC, or on the proxy with the BMC in
// the header.
func (c *Client) newRequest(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	base := c.bmc
	if c.ext != nil {
		base = c.ext
	}
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	if c.ext != nil {
		req.Header.Set(c.header, c.bmc.String())
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("OData-Version", "4.0")
	return req, nil
}

// Get fetches path (an absolute Redfish path, /redfish/v1/...) into v.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	for attempt := 0; ; attempt++ {
		token, err := c.ensureSession(ctx)
		if err != nil {
			return err
		}
		req, err := c.newRequest(ctx, http.MethodGet, path, nil)
		if err != nil {
			return fmt.Errorf("redfish %s: GET %s: %w", c.bmc.Host, path, err)
		}
		c.authorize(req, token)
		resp, err := c.http.Do(req)
		if err != nil {
			return fmt.Errorf("redfish %s: GET %s: %w", c.bmc.Host, path, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("redfish %s: GET %s: %w", c.bmc.Host, path, err)
		}
		if resp.StatusCode == http.StatusUnauthorized && c.session && token != "" && attempt == 0 {
			// The session expired or was revoked: log in again, once.
			c.dropSession(token)
			continue
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden && !c.session {
			return fmt.Errorf("redfish %s: GET %s: %w (HTTP %d) for user %q", c.bmc.Host, path, ErrAuth, resp.StatusCode, c.user)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("redfish %s: GET %s: HTTP %d%s", c.bmc.Host, path, resp.StatusCode, redfishMessage(body))
		}
		if err := json.Unmarshal(body, v); err != nil {
			return fmt.Errorf("redfish %s: GET %s: decode: %w", c.bmc.Host, path, err)
		}
		return nil
	}
}

func (c *Client) authorize(req *http.Request, token string) {
	if token != "" {
		req.Header.Set("X-Auth-Token", token)
	} else {
		req.SetBasicAuth(c.user, c.pass)
	}
}

// ensureSession returns the session token, logging in when there is none;
// "" means basic auth.
func (c *Client) ensureSession(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.session || c.token != "" {
		return c.token, nil
	}
	body, _ := json.Marshal(map[string]string{"UserName": c.user, "Password": c.pass})
	req, err := c.newRequest(ctx, http.MethodPost, SessionsPath, body)
	if err != nil {
		return "", fmt.Errorf("redfish %s: login: %w", c.bmc.Host, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("redfish %s: login: %w", c.bmc.Host, err)
	}
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return "", fmt.Errorf("redfish %s: login: %w (HTTP %d) for user %q%s", c.bmc.Host, ErrAuth, resp.StatusCode, c.user, redfishMessage(rb))
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented:
		// Sessions are off on this BMC: basic auth from now on.
		c.session = false
		return "", nil
	case resp.StatusCode/100 != 2:
		return "", fmt.Errorf("redfish %s: login: HTTP %d%s", c.bmc.Host, resp.StatusCode, redfishMessage(rb))
	}
	tok := resp.Header.Get("X-Auth-Token")
	if tok == "" {
		return "", fmt.Errorf("redfish %s: login: HTTP %d without X-Auth-Token", c.bmc.Host, resp.StatusCode)
	}
	c.token, c.sessionURI = tok, resp.Header.Get("Location")
	c.logins++
	return tok, nil
}

func (c *Client) dropSession(token string) {
	c.mu.Lock()
	if c.token == token {
		c.token, c.sessionURI = "", ""
	}
	c.mu.Unlock()
}

// Logout deletes our session so it does not occupy one of the BMC's few
// session slots until it times out.
func (c *Client) Logout(ctx context.Context) error {
	c.mu.Lock()
	tok, loc := c.token, c.sessionURI
	c.token, c.sessionURI = "", ""
	c.mu.Unlock()
	if tok == "" || loc == "" {
		return nil
	}
	// Location may be absolute; only its path is ours to use.
	path := loc
	if u, err := url.Parse(loc); err == nil {
		path = u.Path
	}
	if !strings.HasPrefix(path, SessionsPath+"/") {
		return fmt.Errorf("redfish %s: logout: session location %q is not under %s", c.bmc.Host, loc, SessionsPath)
	}
	req, err := c.newRequest(ctx, http.MethodDelete, path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Auth-Token", tok)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("redfish %s: logout: %w", c.bmc.Host, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("redfish %s: logout: HTTP %d", c.bmc.Host, resp.StatusCode)
	}
	return nil
}

// redfishMessage extracts the first message of a Redfish error body.
func redfishMessage(body []byte) string {
	var e struct {
		Error struct {
			Message  string `json:"message"`
			Extended []struct {
				Message string `json:"Message"`
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	msg := e.Error.Message
	if len(e.Error.Extended) > 0 && e.Error.Extended[0].Message != "" {
		msg = e.Error.Extended[0].Message
	}
	if msg == "" {
		return ""
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return ": " + msg
}
