package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Access says whom the API believes. The user comes from a header that a
// trusted proxy sets (Grafana's X-Grafana-User with send_user_header), or
// from a token; a header is believed only when the request comes from a
// trusted network or was authenticated by the web configuration (basic
// auth or a verified TLS client certificate), because anyone can send a
// header.
type Access struct {
	// UserHeader names the header that carries the user.
	UserHeader string
	// TrustedNetworks are the addresses whose user header is believed.
	TrustedNetworks []netip.Prefix
	// Authenticated says that the web configuration (exporter-toolkit)
	// requires basic auth: a request that reaches the handler with basic
	// auth credentials has passed it, and its user header is believed.
	// Verified TLS client certificates are believed whatever this says.
	Authenticated bool
	// Admins see every unit and every user's usage.
	Admins []string
	// Tokens maps the hex SHA-256 of a bearer token to its user: a
	// request with `Authorization: Bearer TOKEN` is that user, whatever
	// its address (for `wattrace acct` where no setgid install is
	// possible).
	Tokens map[string]string
}

// identity is who asks.
type identity struct {
	user  string
	admin bool
}

// accessError is an authentication or authorisation failure, answered
// with its status.
type accessError struct {
	status int
	msg    string
}

func (e *accessError) Error() string { return e.msg }

// identify returns who sent r.
func (a *Access) identify(r *http.Request) (identity, error) {
	if auth := r.Header.Get("Authorization"); strings.HasPrefix(auth, "Bearer ") {
		user, ok := a.token(strings.TrimPrefix(auth, "Bearer "))
		if !ok {
			return identity{}, &accessError{http.StatusUnauthorized, "unknown bearer token"}
		}
		return a.who(user), nil
	}
	vals := r.Header.Values(a.UserHeader)
	if len(vals) == 0 {
		return identity{}, &accessError{http.StatusUnauthorized, fmt.Sprintf("no user: header %s is missing", a.UserHeader)}
	}
	if len(vals) > 1 {
		return identity{}, &accessError{http.StatusBadRequest, fmt.Sprintf("header %s given %d times", a.UserHeader, len(vals))}
	}
	if !a.trusted(r) {
		return identity{}, &accessError{http.StatusForbidden,
			fmt.Sprintf("header %s from %s refused: not a trusted network (api.trusted-proxies) and not authenticated", a.UserHeader, r.RemoteAddr)}
	}
	user := vals[0]
	if !name.MatchString(user) {
		return identity{}, &accessError{http.StatusBadRequest, fmt.Sprintf("invalid user %q in header %s", clip(user), a.UserHeader)}
	}
	return a.who(user), nil
}

func (a *Access) who(user string) identity {
	return identity{user: user, admin: slices.Contains(a.Admins, user)}
}

// trusted reports whether r's user header is believed.
func (a *Access) trusted(r *http.Request) bool {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return true
	}
	if a.Authenticated {
		if _, _, ok := r.BasicAuth(); ok {
			return true
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range a.TrustedNetworks {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// token looks a bearer token up by its hash, in constant time per entry.
func (a *Access) token(tok string) (string, bool) {
	sum := sha256.Sum256([]byte(tok))
	h := hex.EncodeToString(sum[:])
	user, found := "", false
	for k, u := range a.Tokens {
		if subtle.ConstantTimeCompare([]byte(k), []byte(h)) == 1 {
			user, found = u, true
		}
	}
	return user, found
}

// HashToken returns what Access.Tokens keys a token by (for the tokens
// file and its docs).
func HashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// WebConfigAuthenticates reports whether an exporter-toolkit web
// configuration file requires basic auth (basic_auth_users), so that
// Access.Authenticated can be set from it: exporter-toolkit refuses a
// request with wrong credentials before the API sees it. An empty path is
// no web configuration.
func WebConfigAuthenticates(path string) (bool, error) {
	if path == "" {
		return false, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("web.config.file: %w", err)
	}
	var c struct {
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return false, fmt.Errorf("web.config.file %s: %w", path, err)
	}
	return len(c.Users) > 0, nil
}

// LoadTokens reads api.tokens-file: a YAML mapping of user names to the
// hex SHA-256 of their token (`wattrace acct --token` or
// WATTRACE_API_TOKEN), as Access.Tokens wants it (hash → user). The file
// holds no token, only hashes.
func LoadTokens(path string) (map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("api.tokens-file: %w", err)
	}
	var byUser map[string]string
	if err := yaml.Unmarshal(b, &byUser); err != nil {
		return nil, fmt.Errorf("api.tokens-file %s: %w", path, err)
	}
	out := make(map[string]string, len(byUser))
	for u, h := range byUser {
		h = strings.ToLower(strings.TrimSpace(h))
		if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" || !name.MatchString(u) {
			return nil, fmt.Errorf("api.tokens-file %s: user %q: want a user name and a hex SHA-256 (sha256sum of the token)", path, u)
		}
		if other, dup := out[h]; dup {
			return nil, fmt.Errorf("api.tokens-file %s: users %q and %q share a token", path, other, u)
		}
		out[h] = u
	}
	return out, nil
}
