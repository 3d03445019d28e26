package api

import (
	"errors"
	"net/http"

	"github.com/wattrace/wattrace/internal/units/access"
)

// Access decides who a request is (internal/units/access): the API believes
// only its answer.
type Access = access.Access

// identity is who asks, as the handlers use it.
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
func (c *Config) identify(r *http.Request) (identity, error) {
	caller, err := c.Access.Identify(r)
	if err != nil {
		var ae *access.Error
		if errors.As(err, &ae) {
			return identity{}, &accessError{ae.Status, ae.Msg}
		}
		return identity{}, err
	}
	return identity{user: caller.User, admin: caller.Admin}, nil
}

// HashToken returns what Access.Tokens keys a token by.
func HashToken(tok string) string { return access.HashToken(tok) }

// LoadTokens reads api.tokens-file (access.LoadTokens).
func LoadTokens(path string) (map[string]string, error) { return access.LoadTokens(path) }
