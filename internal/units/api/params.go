package api

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

// badRequest is a client error: it is answered 400 with its message, never
// 500, and never reaches the store.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, a ...any) error { return &badRequest{msg: fmt.Sprintf(format, a...)} }

// isBadRequest reports whether err is the client's fault.
func isBadRequest(err error) bool {
	var b *badRequest
	return errors.As(err, &b)
}

// name is what a user, project, cluster or unit id may look like: the
// characters Unix user names, Slurm accounts, Kubernetes namespaces and
// pod names, libvirt domain names and UUIDs and systemd unit names use.
// Anything else (quotes, semicolons, spaces, comment dashes at the start,
// NULs, wildcards) is refused before the store sees it: the store binds
// parameters, and this keeps what it is given to what a name can be.
var name = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@:+=\-]{0,127}$`)

// maxValues bounds repeated parameters (user=a&user=b…).
const maxValues = 100

// kinds are the unit kinds the exporters resolve (pkg/workload's levels),
// as units.Kinds lists them.
var kinds = func() []string {
	var out []string
	for _, k := range units.Kinds() {
		out = append(out, string(k))
	}
	return out
}()

// unitID is a unit id: a name, or a PBS array subjob's id, whose index is
// in brackets (123[4].server).
var unitID = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@:+=\-]{0,127}$|^[0-9]{1,12}\[[0-9]{0,12}\]\.[A-Za-z0-9][A-Za-z0-9.-]{0,254}$`)

// minTime is the earliest time a query may name: nothing older can be in
// the store, and it keeps year-0 and negative times out of SQL.
var minTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// params is one request's query string, checked against the parameters
// its endpoint accepts (anything else is refused as unknown).
type params struct {
	v url.Values
}

func newParams(raw string, allowed ...string) (*params, error) {
	v, err := url.ParseQuery(raw)
	if err != nil {
		return nil, badf("malformed query string: %v", err)
	}
	for k := range v {
		if !slices.Contains(allowed, k) {
			return nil, badf("unknown parameter %q (this endpoint accepts %s)", k, strings.Join(allowed, ", "))
		}
	}
	return &params{v: v}, nil
}

// one returns the single value of key ("" when absent); a repeated key is
// an error.
func (p *params) one(key string) (string, error) {
	vs := p.v[key]
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", badf("parameter %q given %d times, at most once", key, len(vs))
}

// names returns every value of key, each a valid name; comma-separated
// values are split (user=a,b is user=a&user=b).
func (p *params) names(key string) ([]string, error) { return p.matching(key, name) }

// ids returns every value of key, each a valid unit id.
func (p *params) ids(key string) ([]string, error) { return p.matching(key, unitID) }

func (p *params) matching(key string, re *regexp.Regexp) ([]string, error) {
	var out []string
	for _, raw := range p.v[key] {
		for _, s := range strings.Split(raw, ",") {
			if !re.MatchString(s) {
				return nil, badf("invalid %s %q: a name of letters, digits and _.@:+=- (at most 128, not starting with a sign)", key, clip(s))
			}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	if len(out) > maxValues {
		return nil, badf("too many values of %q: %d, at most %d", key, len(out), maxValues)
	}
	return out, nil
}

// kinds returns the kind filter.
func (p *params) kinds() ([]string, error) {
	vs, err := p.names("kind")
	if err != nil {
		return nil, err
	}
	for _, k := range vs {
		if !slices.Contains(kinds, k) {
			return nil, badf("invalid kind %q: one of %s", k, strings.Join(kinds, ", "))
		}
	}
	return vs, nil
}

// boolean returns the value of key as a tri-state: nil when absent.
func (p *params) boolean(key string) (*bool, error) {
	s, err := p.one(key)
	if err != nil || s == "" {
		return nil, err
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return nil, badf("invalid %s %q: true or false", key, clip(s))
	}
	return &b, nil
}

// integer returns key's value in [lo, hi], def when absent.
func (p *params) integer(key string, def, lo, hi int) (int, error) {
	s, err := p.one(key)
	if err != nil || s == "" {
		return def, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badf("invalid %s %q: an integer from %d to %d", key, clip(s), lo, hi)
	}
	return n, nil
}

// enum returns key's value, one of allowed, def when absent.
func (p *params) enum(key, def string, allowed ...string) (string, error) {
	s, err := p.one(key)
	if err != nil || s == "" {
		return def, err
	}
	if !slices.Contains(allowed, s) {
		return "", badf("invalid %s %q: one of %s", key, clip(s), strings.Join(allowed, ", "))
	}
	return s, nil
}

// fields returns the requested response fields, each one of known; nil
// means all.
func (p *params) fields(known []string) ([]string, error) {
	var out []string
	for _, raw := range p.v["fields"] {
		for _, f := range strings.Split(raw, ",") {
			if !slices.Contains(known, f) {
				return nil, badf("unknown field %q: one of %s", clip(f), strings.Join(known, ", "))
			}
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out, nil
}

// timeRange is a validated [From, To) interval.
type timeRange struct{ From, To time.Time }

// timeRange reads from/to. A missing to is now; a missing from is to minus
// def. The range must be ordered, inside [2000, now+1d] and no longer than
// max.
func (p *params) timeRange(now time.Time, def, max time.Duration) (timeRange, error) {
	fs, err := p.one("from")
	if err != nil {
		return timeRange{}, err
	}
	ts, err := p.one("to")
	if err != nil {
		return timeRange{}, err
	}
	latest := now.Add(24 * time.Hour)
	r := timeRange{To: now}
	if ts != "" {
		if r.To, err = parseTime("to", ts, latest); err != nil {
			return timeRange{}, err
		}
	}
	r.From = r.To.Add(-def)
	if fs != "" {
		if r.From, err = parseTime("from", fs, latest); err != nil {
			return timeRange{}, err
		}
	}
	if r.From.Before(minTime) {
		r.From = minTime
	}
	if !r.From.Before(r.To) {
		return timeRange{}, badf("invalid time range: from (%s) is not before to (%s)", r.From.Format(time.RFC3339), r.To.Format(time.RFC3339))
	}
	if d := r.To.Sub(r.From); d > max {
		return timeRange{}, badf("time range of %s is longer than the maximum of %s (api.max-range)", d.Round(time.Second), max)
	}
	return r, nil
}

// parseTime accepts what Prometheus's API accepts: RFC 3339 or Unix
// seconds (with a fraction), between 2000 and latest.
func parseTime(key, s string, latest time.Time) (time.Time, error) {
	var t time.Time
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < float64(minTime.Unix()) || f > float64(latest.Unix()) {
			return time.Time{}, badf("invalid %s %q: a time from %s to %s", key, clip(s), minTime.Format(time.RFC3339), latest.Format(time.RFC3339))
		}
		sec, frac := math.Modf(f)
		t = time.Unix(int64(sec), int64(frac*1e9)).UTC()
	} else if t, err = time.Parse(time.RFC3339Nano, s); err != nil {
		return time.Time{}, badf("invalid %s %q: RFC 3339 (2026-01-02T15:04:05Z) or Unix seconds", key, clip(s))
	}
	if t.Before(minTime) || t.After(latest) {
		return time.Time{}, badf("invalid %s %q: a time from %s to %s", key, clip(s), minTime.Format(time.RFC3339), latest.Format(time.RFC3339))
	}
	return t.UTC(), nil
}

// clip keeps error messages short and printable whatever was sent.
func clip(s string) string {
	const n = 64
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
