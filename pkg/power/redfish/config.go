// Package redfish reads a node's power from its BMC over DMTF Redfish:
// the chassis' EnvironmentMetrics (and the Sensors they point to),
// PowerSubsystem power-supply metrics, or the legacy Power resource.
package redfish

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Config says how to reach one BMC. Validate before use.
type Config struct {
	// URL is the BMC's base URL, e.g. "https://{hostname}-bmc.example.com".
	// "{hostname}" is replaced with Hostname (the node's short host name),
	// so one configuration serves a whole cluster.
	URL string
	// Hostname replaces "{hostname}"; empty means os.Hostname's first
	// label.
	Hostname string
	// Chassis is the chassis Id to read; empty means the first chassis
	// that has power data.
	Chassis string

	Username     string
	UsernameFile string // file holding the user name (trailing newline ignored)
	Password     string // prefer PasswordFile or PasswordEnv: never logged
	PasswordFile string
	PasswordEnv  string // environment variable holding the password

	// Auth is "session" (default: a session token, falling back to basic
	// auth when the BMC has sessions turned off) or "basic".
	Auth string

	InsecureSkipVerify bool
	CAFile             string // PEM bundle to verify the BMC's certificate
	Timeout            time.Duration

	// ExternalURL sends every request to this proxy instead of the BMC,
	// with the BMC's base URL in ExternalHeader (see package proxy).
	ExternalURL    string
	ExternalHeader string // default "X-Redfish-Url"
}

// DefaultExternalHeader carries the real BMC address to a proxy.
const DefaultExternalHeader = "X-Redfish-Url"

// String redacts the password so a logged or printed Config never shows
// it.
func (c Config) String() string {
	pw := ""
	if c.Password != "" {
		pw = "<redacted>"
	}
	return fmt.Sprintf("redfish.Config{URL:%q Chassis:%q Username:%q Password:%s PasswordFile:%q PasswordEnv:%q Auth:%q ExternalURL:%q}",
		c.URL, c.Chassis, c.Username, pw, c.PasswordFile, c.PasswordEnv, c.Auth, c.ExternalURL)
}

// GoString redacts too (%#v).
func (c Config) GoString() string { return c.String() }

// Validate checks the configuration; errors name the field.
func (c Config) Validate() error {
	if c.URL == "" {
		return errors.New("redfish.url: required")
	}
	u, err := url.Parse(strings.ReplaceAll(c.URL, "{hostname}", "node"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("redfish.url: %q is not an http(s)://host URL", c.URL)
	}
	if u.Path != "" && u.Path != "/" {
		return fmt.Errorf("redfish.url: %q must not have a path (the Redfish root is /redfish/v1)", c.URL)
	}
	switch c.Auth {
	case "", "session", "basic":
	default:
		return fmt.Errorf("redfish.auth: %q, allowed session, basic", c.Auth)
	}
	if c.Username != "" && c.UsernameFile != "" {
		return errors.New("redfish.username and redfish.username-file: set one")
	}
	if c.Username == "" && c.UsernameFile == "" {
		return errors.New("redfish.username: required (or redfish.username-file)")
	}
	n := 0
	for _, s := range []string{c.Password, c.PasswordFile, c.PasswordEnv} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return errors.New("redfish.password-file, redfish.password-env: set exactly one")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("redfish.timeout: %v, want > 0", c.Timeout)
	}
	if c.CAFile != "" && c.InsecureSkipVerify {
		return errors.New("redfish.ca-file and redfish.insecure-skip-verify: set one")
	}
	if c.ExternalURL != "" {
		e, err := url.Parse(c.ExternalURL)
		if err != nil || (e.Scheme != "https" && e.Scheme != "http") || e.Host == "" {
			return fmt.Errorf("redfish.external-url: %q is not an http(s)://host URL", c.ExternalURL)
		}
	}
	return nil
}

// bmcURL is URL with {hostname} replaced.
func (c Config) bmcURL() (*url.URL, error) {
	host := c.Hostname
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("hostname for redfish.url: %w", err)
		}
		host, _, _ = strings.Cut(h, ".")
	}
	u, err := url.Parse(strings.ReplaceAll(c.URL, "{hostname}", host))
	if err != nil {
		return nil, fmt.Errorf("redfish.url: %w", err)
	}
	u.Path = ""
	return u, nil
}

// credentials resolves the user name and password from their sources.
func (c Config) credentials() (user, pass string, err error) {
	user = c.Username
	if c.UsernameFile != "" {
		b, err := os.ReadFile(c.UsernameFile)
		if err != nil {
			return "", "", fmt.Errorf("redfish.username-file: %w", err)
		}
		user = strings.TrimRight(string(b), "\r\n")
	}
	switch {
	case c.Password != "":
		pass = c.Password
	case c.PasswordFile != "":
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return "", "", fmt.Errorf("redfish.password-file: %w", err)
		}
		pass = strings.TrimRight(string(b), "\r\n")
	case c.PasswordEnv != "":
		v, ok := os.LookupEnv(c.PasswordEnv)
		if !ok {
			return "", "", fmt.Errorf("redfish.password-env: environment variable %s is not set", c.PasswordEnv)
		}
		pass = v
	}
	if user == "" || pass == "" {
		return "", "", errors.New("redfish: empty user name or password")
	}
	return user, pass, nil
}

// httpClient builds the TLS and timeout settings. Redirects are not
// followed: a BMC has no reason to send us elsewhere, and following would
// resend credentials to wherever it pointed.
func (c Config) httpClient() (*http.Client, error) {
	tc := &tls.Config{InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12} //nolint:gosec // BMCs often have self-signed certificates; opt-in
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redfish.ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redfish.ca-file: %s holds no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	tr.Proxy = nil // never through HTTP(S)_PROXY: credentials go to the BMC only
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}
