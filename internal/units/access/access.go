// Package access decides who sent a request to the units API.
//
// A request carries at most one credential, and a credential names one
// principal: a MUNGE credential (its uid's user), a bearer token (its
// user), HTTP basic auth that this package checks (the user name), a TLS
// client certificate the server verified (its subject CN), or, weakest and
// kept for compatibility, an address in a trusted network (the address).
// The user a request acts for is its principal, except for proxy
// principals (Grafana): only they may name another user in the user
// header, and they must, since a proxy is not a user. Any other principal
// that names someone else in the header is refused, so holding a
// credential never lets anyone speak for another user.
package access

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// Methods: how a principal authenticated (Caller.Method).
const (
	MethodMunge   = "munge"
	MethodToken   = "token"
	MethodBasic   = "basic"
	MethodCert    = "cert"
	MethodNetwork = "network"
)

// Caller is who sent a request.
type Caller struct {
	// User is whose units the request is for: the principal, or the user
	// a proxy principal named in the user header.
	User string
	// Admin says User is one of Access.Admins.
	Admin bool
	// Principal is who authenticated: the user, or the proxy's name (a
	// basic-auth user, a certificate CN, or the address of a trusted
	// network).
	Principal string
	// Method is how the principal authenticated: munge, token, basic,
	// cert or network.
	Method string
}

// Error is an authentication (401) or authorisation (403) failure, or a
// malformed identity (400).
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// HTTPStatus is the status the request is answered with.
func (e *Error) HTTPStatus() int { return e.Status }

func unauthorized(format string, a ...any) *Error {
	return &Error{http.StatusUnauthorized, fmt.Sprintf(format, a...)}
}

func forbidden(format string, a ...any) *Error {
	return &Error{http.StatusForbidden, fmt.Sprintf(format, a...)}
}

// Name is what a user name may be: letters, digits and _.@:+=-, at most
// 128, not starting with a sign (the API's rule for every name).
var Name = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@:+=\-]{0,127}$`)

// Access is the access-control configuration. Its fields are read only;
// the state that changes (MUNGE's replay cache, basic auth's cache of
// checked passwords) lives behind the Munge and Basic pointers, so copies
// of an Access share it.
type Access struct {
	// UserHeader names the header a proxy principal sets to the user
	// (Grafana's X-Grafana-User).
	UserHeader string
	// TrustedNetworks are addresses whose requests are a proxy principal
	// without any credential (api.trusted-proxies). Weaker than a
	// credential: anyone who can send from such an address is the proxy.
	TrustedNetworks []netip.Prefix
	// Proxies are the principals (basic-auth users, certificate CNs) that
	// may name the user in UserHeader (api.proxies).
	Proxies []string
	// Admins see every unit and every user's usage.
	Admins []string
	// Tokens maps the hex SHA-256 of a bearer token to its user.
	Tokens map[string]string
	// Basic checks HTTP basic auth; nil refuses it.
	Basic *Basic
	// Munge checks MUNGE credentials; nil refuses them.
	Munge *Munge
}

// Identify returns who sent r; the error is an *Error.
func (a *Access) Identify(r *http.Request) (Caller, error) {
	c, err := a.principal(r)
	if err != nil {
		return Caller{}, err
	}
	vals := r.Header.Values(a.UserHeader)
	if len(vals) > 1 {
		return Caller{}, &Error{http.StatusBadRequest, fmt.Sprintf("header %s given %d times", a.UserHeader, len(vals))}
	}
	proxy := c.Method == MethodNetwork ||
		((c.Method == MethodBasic || c.Method == MethodCert) && slices.Contains(a.Proxies, c.Principal))
	switch {
	case proxy && len(vals) == 0:
		if c.Method == MethodNetwork {
			return Caller{}, unauthorized("no user: header %s is missing and the request carries no credential", a.UserHeader)
		}
		// A proxy is not a user: without the header it would see its
		// own (empty) units, or an admin's if misnamed; refuse instead.
		return Caller{}, forbidden("proxy %s must name the user in header %s", c.Principal, a.UserHeader)
	case proxy:
		c.User = vals[0]
	case len(vals) == 1 && vals[0] != c.Principal:
		return Caller{}, forbidden("%s %s may not act for %q: only a proxy (api.proxies) may set header %s",
			c.Method, c.Principal, clip(vals[0]), a.UserHeader)
	default:
		c.User = c.Principal
	}
	if !Name.MatchString(c.User) {
		if proxy {
			return Caller{}, &Error{http.StatusBadRequest, fmt.Sprintf("invalid user %q in header %s", clip(c.User), a.UserHeader)}
		}
		return Caller{}, forbidden("%s principal %q is not a valid user name", c.Method, clip(c.User))
	}
	c.Admin = slices.Contains(a.Admins, c.User)
	return c, nil
}

// principal authenticates r's one credential.
func (a *Access) principal(r *http.Request) (Caller, error) {
	auths := r.Header.Values("Authorization")
	if len(auths) > 1 {
		return Caller{}, unauthorized("%d Authorization headers: send one credential", len(auths))
	}
	if len(auths) == 1 {
		scheme, cred, _ := strings.Cut(auths[0], " ")
		switch strings.ToLower(scheme) {
		case "munge":
			if a.Munge == nil {
				return Caller{}, unauthorized("MUNGE credentials are not enabled on this server (api.munge.enabled)")
			}
			user, err := a.Munge.Verify(r.Context(), strings.TrimSpace(cred), r)
			if err != nil {
				return Caller{}, err
			}
			return Caller{Principal: user, Method: MethodMunge}, nil
		case "bearer":
			user, ok := a.token(strings.TrimSpace(cred))
			if !ok {
				return Caller{}, unauthorized("unknown bearer token")
			}
			return Caller{Principal: user, Method: MethodToken}, nil
		case "basic":
			user, pass, ok := r.BasicAuth()
			if !ok {
				return Caller{}, unauthorized("malformed basic auth")
			}
			if a.Basic == nil || !a.Basic.Check(user, pass) {
				return Caller{}, unauthorized("basic auth refused")
			}
			return Caller{Principal: user, Method: MethodBasic}, nil
		default:
			return Caller{}, unauthorized("unknown Authorization scheme %q (MUNGE, Bearer or Basic)", clip(scheme))
		}
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		cn := r.TLS.VerifiedChains[0][0].Subject.CommonName
		if cn == "" {
			return Caller{}, unauthorized("the client certificate has no subject CN")
		}
		return Caller{Principal: cn, Method: MethodCert}, nil
	}
	if ip, ok := a.trustedAddr(r); ok {
		return Caller{Principal: ip.String(), Method: MethodNetwork}, nil
	}
	if len(r.Header.Values(a.UserHeader)) > 0 {
		// A header alone is a claim anyone can make: forbidden, as it
		// always was, whatever else the request lacks.
		return Caller{}, forbidden("header %s from %s refused: no credential, and not a trusted network (api.trusted-proxies)", a.UserHeader, r.RemoteAddr)
	}
	return Caller{}, unauthorized("no credential: send a MUNGE credential, a bearer token, basic auth or a client certificate")
}

// trustedAddr reports whether r comes from api.trusted-proxies.
func (a *Access) trustedAddr(r *http.Request) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	ip = ip.Unmap()
	for _, p := range a.TrustedNetworks {
		if p.Contains(ip) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// clip keeps error messages short and printable whatever was sent.
func clip(s string) string {
	const n = 64
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
