package access

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MungePayload is what `wattrace acct` encodes in each MUNGE credential:
// it binds the credential to one request on one server, so a server that
// receives it (a rogue one the client was pointed at, or a proxy that
// logged it) cannot use it elsewhere or for another request. It names no
// user: the credential's uid, which munged vouches for, is the user.
type MungePayload struct {
	// V is the payload's version, 1.
	V int `json:"v"`
	// Audience is the server the client connected to, scheme://host:port
	// (Audience normalises it).
	Audience string `json:"aud"`
	// Method and Path are the request's method and request URI (path and
	// query).
	Method string `json:"method"`
	Path   string `json:"path"`
	// Nonce makes two credentials for the same request differ.
	Nonce string `json:"nonce,omitempty"`
}

// Audience normalises a server URL to scheme://host:port, lower-case, the
// port explicit, so a client's and a server's spelling compare equal.
func Audience(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case scheme != "http" && scheme != "https":
		return "", fmt.Errorf("%q: want an http(s) URL", raw)
	case u.Hostname() == "":
		return "", fmt.Errorf("%q: no host", raw)
	case port == "" && scheme == "http":
		port = "80"
	case port == "":
		port = "443"
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port), nil
}

// MungeConfig configures MUNGE authentication (api.munge.*).
type MungeConfig struct {
	// Unmunge is the unmunge command (api.munge.unmunge).
	Unmunge string
	// Socket is munged's socket (api.munge.socket), given to unmunge;
	// munge's default when empty.
	Socket string
	// Audiences are the URLs this server is known under
	// (api.munge.audiences): a credential made for another is refused.
	Audiences []string
	// MaxTTL refuses credentials that live longer (api.munge.max-ttl):
	// acct makes short-lived ones, and a long-lived one is more use to a
	// thief.
	MaxTTL time.Duration
	// LookupUser maps a uid to its user name (os/user when nil).
	LookupUser func(uid string) (string, error)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// MaxConcurrent bounds the unmunge processes running at once
	// (DefaultMungeConcurrent when 0): anyone who can reach the server
	// can send a credential, and each costs a process.
	MaxConcurrent int
}

// DefaultMungeConcurrent is MungeConfig.MaxConcurrent's default.
const DefaultMungeConcurrent = 16

// Munge checks MUNGE credentials with unmunge, which asks the local
// munged: there is no pure-Go MUNGE decoder, and the cgo binding would
// need libmunge's headers to build.
type Munge struct {
	cfg       MungeConfig
	audiences map[string]bool
	// seen is this server's replay cache (credential hash → when it may
	// be forgotten): munged keeps one too, but only per munged, and the
	// server may be reached through several.
	mu   sync.Mutex
	seen map[[32]byte]time.Time
	// slots holds a token per running unmunge.
	slots chan struct{}
}

// DefaultMungeMaxTTL is MungeConfig.MaxTTL's default.
const DefaultMungeMaxTTL = 5 * time.Minute

// NewMunge checks cfg; errors name the api.munge key.
func NewMunge(cfg MungeConfig) (*Munge, error) {
	if cfg.Unmunge == "" {
		cfg.Unmunge = "unmunge"
	}
	if _, err := exec.LookPath(cfg.Unmunge); err != nil {
		return nil, fmt.Errorf("api.munge.unmunge %q: %w", cfg.Unmunge, err)
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = DefaultMungeMaxTTL
	}
	if cfg.MaxTTL < 0 {
		return nil, fmt.Errorf("invalid value %s for api.munge.max-ttl: must be positive", cfg.MaxTTL)
	}
	if len(cfg.Audiences) == 0 {
		return nil, errors.New("api.munge.audiences: required with api.munge.enabled: the URLs clients reach this server under (https://host:port)")
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMungeConcurrent
	}
	m := &Munge{cfg: cfg, audiences: map[string]bool{}, seen: map[[32]byte]time.Time{}, slots: make(chan struct{}, cfg.MaxConcurrent)}
	for _, a := range cfg.Audiences {
		n, err := Audience(a)
		if err != nil {
			return nil, fmt.Errorf("invalid value %q for api.munge.audiences: %w", a, err)
		}
		m.audiences[n] = true
	}
	if m.cfg.LookupUser == nil {
		m.cfg.LookupUser = func(uid string) (string, error) {
			u, err := user.LookupId(uid)
			if err != nil {
				return "", err
			}
			return u.Username, nil
		}
	}
	if m.cfg.Now == nil {
		m.cfg.Now = time.Now
	}
	return m, nil
}

// mungeMeta is what unmunge says of a credential.
type mungeMeta struct {
	status, uid string
	encoded     time.Time
	ttl         time.Duration
	payload     []byte
}

// Verify decodes cred, checks it was made for r on this server and not
// seen before, and returns its uid's user name.
func (m *Munge) Verify(ctx context.Context, cred string, r *http.Request) (string, error) {
	if len(cred) > 16<<10 || !strings.HasPrefix(cred, "MUNGE:") ||
		strings.Trim(cred, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=:") != "" {
		return "", unauthorized("malformed MUNGE credential")
	}
	meta, err := m.unmunge(ctx, cred)
	if err != nil {
		return "", err
	}
	if meta.ttl > m.cfg.MaxTTL {
		return "", unauthorized("MUNGE credential lives %s, more than api.munge.max-ttl %s", meta.ttl, m.cfg.MaxTTL)
	}
	now := m.cfg.Now()
	if now.Sub(meta.encoded) > m.cfg.MaxTTL {
		return "", unauthorized("MUNGE credential encoded %s ago, more than api.munge.max-ttl %s", now.Sub(meta.encoded).Round(time.Second), m.cfg.MaxTTL)
	}
	var p MungePayload
	if err := json.Unmarshal(meta.payload, &p); err != nil || p.V != 1 {
		return "", unauthorized("MUNGE credential without a wattrace payload (made by wattrace acct)")
	}
	aud, err := Audience(p.Audience)
	if err != nil || !m.audiences[aud] {
		return "", unauthorized("MUNGE credential made for %q, not this server (api.munge.audiences)", clip(p.Audience))
	}
	if p.Method != r.Method || p.Path != requestTarget(r) {
		return "", unauthorized("MUNGE credential made for %s %s, not this request", clip(p.Method), clip(p.Path))
	}
	name, err := m.cfg.LookupUser(meta.uid)
	if err != nil {
		return "", unauthorized("MUNGE credential of uid %s, which has no user name here", meta.uid)
	}
	// Replays last: only credentials that passed every other check are
	// remembered, so garbage cannot fill the cache.
	if !m.remember(sha256.Sum256([]byte(cred)), meta.encoded.Add(meta.ttl+DefaultMungeMaxTTL), now) {
		return "", unauthorized("MUNGE credential replayed")
	}
	return name, nil
}

// requestTarget is the request's path and query as the client sent them,
// which is what its credential names. A handler mounted behind
// http.StripPrefix (the query guard under /tsdb) gets a URL without the
// prefix, but the request line, RequestURI, is left whole.
func requestTarget(r *http.Request) string {
	if r.RequestURI != "" {
		if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
			return u.RequestURI()
		}
	}
	return r.URL.RequestURI()
}

// remember records a credential until forget; false when it was seen.
func (m *Munge) remember(key [32]byte, forget, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, t := range m.seen {
		if now.After(t) {
			delete(m.seen, k)
		}
	}
	if _, dup := m.seen[key]; dup {
		return false
	}
	m.seen[key] = forget
	return true
}

// unmunge runs the command on cred and parses its metadata; a status
// other than success (expired, rewound, replayed, unauthorized, invalid)
// is a 401 with unmunge's message.
func (m *Munge) unmunge(ctx context.Context, cred string) (mungeMeta, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case m.slots <- struct{}{}:
		defer func() { <-m.slots }()
	case <-ctx.Done():
		return mungeMeta{}, &Error{http.StatusServiceUnavailable, "MUNGE: too many credentials being checked; try again"}
	}
	args := []string{"--numeric", "--keys=STATUS,ENCODE_TIME,TTL,UID"}
	if m.cfg.Socket != "" {
		args = append(args, "--socket="+m.cfg.Socket)
	}
	cmd := exec.CommandContext(ctx, m.cfg.Unmunge, args...)
	cmd.Stdin = strings.NewReader(cred)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	runErr := cmd.Run()
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return mungeMeta{}, &Error{http.StatusServiceUnavailable, fmt.Sprintf("MUNGE: running %s: %v", m.cfg.Unmunge, runErr)}
	}
	head, payload, _ := bytes.Cut(out.Bytes(), []byte("\n\n"))
	meta := mungeMeta{payload: payload}
	var encoded, ttl string
	for _, line := range strings.Split(string(head), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "STATUS":
			meta.status = v
		case "ENCODE_TIME":
			encoded = v
		case "TTL":
			ttl = v
		case "UID":
			meta.uid = v
		}
	}
	if runErr != nil || meta.status != "0" {
		// unmunge prints the metadata of an expired or replayed
		// credential with its status and says nothing on stderr; for
		// the others it says why on stderr and prints nothing.
		msg := strings.TrimPrefix(strings.TrimSpace(stderr.String()), "unmunge: Error: ")
		if msg == "" {
			msg = mungeStatus(meta.status)
		}
		return mungeMeta{}, unauthorized("MUNGE credential refused: %s", clip(msg))
	}
	sec, err1 := strconv.ParseInt(encoded, 10, 64)
	t, err2 := strconv.ParseInt(ttl, 10, 64)
	uid, err3 := strconv.ParseUint(meta.uid, 10, 32)
	if err := errors.Join(err1, err2, err3); err != nil {
		return mungeMeta{}, unauthorized("MUNGE: unmunge's metadata: %v", err)
	}
	meta.uid = strconv.FormatUint(uid, 10)
	meta.encoded, meta.ttl = time.Unix(sec, 0), time.Duration(t)*time.Second
	return meta, nil
}

// mungeStatus names libmunge's error codes (munge.h's munge_err_t) that
// unmunge reports as STATUS.
func mungeStatus(code string) string {
	if n, ok := map[string]string{
		"8": "Invalid credential format", "9": "Invalid credential version", "10": "Invalid cipher type",
		"11": "Invalid MAC type", "12": "Invalid compression type", "13": "Unrecognized security realm",
		"14": "Invalid credential", "15": "Expired credential", "16": "Rewound credential",
		"17": "Replayed credential", "18": "Unauthorized credential",
	}[code]; ok {
		return n
	}
	return "status " + code
}
