package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"
)

// token looks a bearer token up by its hash, in constant time per entry.
func (a *Access) token(tok string) (string, bool) {
	h := HashToken(tok)
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

// LoadTokens reads api.tokens-file: a YAML mapping of user names to the
// hex SHA-256 of their token, as Access.Tokens wants it (hash → user). The
// file holds no token, only hashes.
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
		if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" || !Name.MatchString(u) {
			return nil, fmt.Errorf("api.tokens-file %s: user %q: want a user name and a hex SHA-256 (sha256sum of the token)", path, u)
		}
		if other, dup := out[h]; dup {
			return nil, fmt.Errorf("api.tokens-file %s: users %q and %q share a token", path, other, u)
		}
		out[h] = u
	}
	return out, nil
}

// Basic checks HTTP basic auth against bcrypt hashes, as exporter-toolkit's
// basic_auth_users does, but here, so the API sees every request and
// decides what the user is allowed (exporter-toolkit would answer 401 to
// /health and to bearer or MUNGE requests before the API saw them).
type Basic struct {
	users map[string]string // user → bcrypt hash
	// ok caches successful checks (bcrypt costs tens of milliseconds, and
	// Grafana sends several requests per dashboard): the SHA-256 of user,
	// password and hash, so a changed hash is a miss.
	mu sync.Mutex
	ok map[[32]byte]bool
	// dummy is compared against for unknown users.
	dummy []byte
}

// maxCached bounds Basic's cache; it is emptied when full.
const maxCached = 1024

// NewBasic returns a checker of users (name → bcrypt hash); every hash is
// checked to be bcrypt.
func NewBasic(users map[string]string) (*Basic, error) {
	for u, h := range users {
		if _, err := bcrypt.Cost([]byte(h)); err != nil {
			return nil, fmt.Errorf("basic_auth_users: user %q: not a bcrypt hash: %w", u, err)
		}
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("-"), bcrypt.DefaultCost)
	if err != nil {
		return nil, fmt.Errorf("basic auth: %w", err)
	}
	return &Basic{users: users, ok: map[[32]byte]bool{}, dummy: dummy}, nil
}

// Users lists the configured user names.
func (b *Basic) Users() []string {
	out := make([]string, 0, len(b.users))
	for u := range b.users {
		out = append(out, u)
	}
	return out
}

// Check reports whether pass is user's password.
func (b *Basic) Check(user, pass string) bool {
	hash, found := b.users[user]
	if !found {
		// Spend a bcrypt anyway, so an unknown user is not told apart
		// by the time of the answer.
		_ = bcrypt.CompareHashAndPassword(b.dummy, []byte(pass))
		return false
	}
	key := sha256.Sum256([]byte(user + "\x00" + pass + "\x00" + hash))
	b.mu.Lock()
	hit := b.ok[key]
	b.mu.Unlock()
	if hit {
		return true
	}
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte(pass)) != nil {
		return false
	}
	b.mu.Lock()
	if len(b.ok) >= maxCached {
		clear(b.ok)
	}
	b.ok[key] = true
	b.mu.Unlock()
	return true
}
