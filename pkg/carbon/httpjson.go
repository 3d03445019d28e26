package carbon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxBody bounds what is read from a provider: the answers are a few
// hundred bytes, and a misbehaving server must not make us buffer more.
const maxBody = 1 << 20

// StatusError is a non-2xx answer.
type StatusError struct {
	Code int
	// Body is the start of the answer, with secrets redacted.
	Body string
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("HTTP %d", e.Code)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Code, e.Body)
}

// getJSON GETs url with the given headers (and basic auth when user is
// set), checks the status and decodes the JSON answer into out. Every
// secret is redacted from the error it returns: a server that echoes a
// token in an error page must not put it into our logs. A body that is not
// JSON of the expected shape is an Unreadable rejection.
func getJSON(ctx context.Context, c *http.Client, url string, hdr http.Header, user, pass string, out any, secrets ...string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("request %s: %w", redactURL(url), err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
		secrets = append(secrets, pass)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return redact(fmt.Errorf("GET %s: %w", redactURL(url), err), secrets)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return redact(fmt.Errorf("GET %s: read: %w", redactURL(url), err), secrets)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		snip := strings.TrimSpace(string(body))
		if len(snip) > 200 {
			snip = snip[:200]
		}
		return redact(fmt.Errorf("GET %s: %w", redactURL(url), &StatusError{Code: resp.StatusCode, Body: snip}), secrets)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return unreadable("GET %s: decode: %v", redactURL(url), err)
	}
	return nil
}

// redactedError keeps the chain for errors.As (a *StatusError stays
// inspectable) while its text carries no secret.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func redact(err error, secrets []string) error {
	var sErr *StatusError
	if errors.As(err, &sErr) {
		sErr.Body = redactString(sErr.Body, secrets)
	}
	return &redactedError{msg: redactString(err.Error(), secrets), err: err}
}

func redactString(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "<redacted>")
		}
	}
	return s
}

// redactURL drops the query: none of ours carries a secret today, but an
// operator may paste one into a configured URL.
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}
