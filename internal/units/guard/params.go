package guard

import (
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// endpoint is one query API path the guard serves.
type endpoint struct {
	// name labels the guard's metrics.
	name string
	// method is how the upstream is asked: POST with a form body where
	// the API takes one, so long scoped queries never hit a URL limit.
	method string
	// params are the only parameters forwarded; anything else the
	// client sends (extra_label, extra_filters[], nocache, dedup,
	// partial_response, stats…) is dropped, since several TSDBs widen or
	// bypass a query by them.
	params []string
	// query: the endpoint takes a PromQL expression (required).
	query bool
	// match: the endpoint takes series selectors (match[]).
	match bool
	// matchRequired: the upstream itself refuses the call without match[].
	matchRequired bool
}

// Parameter names.
const (
	pQuery   = "query"
	pTime    = "time"
	pTimeout = "timeout"
	pStart   = "start"
	pEnd     = "end"
	pStep    = "step"
	pMatch   = "match[]"
	pLimit   = "limit"
)

// endpointFor returns the endpoint serving path (below the guard's
// prefix) and, for label values, the label's name.
func endpointFor(path string) (endpoint, string, bool) {
	switch path {
	case "/api/v1/query":
		return endpoint{name: "query", method: http.MethodPost, params: []string{pQuery, pTime, pTimeout, pLimit}, query: true}, "", true
	case "/api/v1/query_range":
		return endpoint{name: "query_range", method: http.MethodPost, params: []string{pQuery, pStart, pEnd, pStep, pTimeout, pLimit}, query: true}, "", true
	case "/api/v1/query_exemplars":
		return endpoint{name: "query_exemplars", method: http.MethodPost, params: []string{pQuery, pStart, pEnd}, query: true}, "", true
	case "/api/v1/series":
		return endpoint{name: "series", method: http.MethodPost, params: []string{pMatch, pStart, pEnd, pLimit}, match: true, matchRequired: true}, "", true
	case "/api/v1/labels":
		return endpoint{name: "labels", method: http.MethodPost, params: []string{pMatch, pStart, pEnd, pLimit}, match: true}, "", true
	}
	name, ok := strings.CutPrefix(path, "/api/v1/label/")
	if name, ok2 := strings.CutSuffix(name, "/values"); ok && ok2 && name != "" {
		// Prometheus serves label values by GET only.
		return endpoint{name: "label_values", method: http.MethodGet, params: []string{pMatch, pStart, pEnd, pLimit}, match: true}, name, true
	}
	return endpoint{}, "", false
}

// maxMatchers bounds match[] values in one request.
const maxMatchers = 64

// readForm returns the parameters of r, from its URL and, for a POST, its
// form body, without merging duplicates away: Go's ParseForm would hand
// the first of two values to the guard while a TSDB may read the last,
// so the caller refuses repeats instead of guessing.
func readForm(r *http.Request, maxBody int64) (url.Values, error) {
	form, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badData("invalid query string: %v", err)
	}
	if r.Method != http.MethodPost {
		return form, nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/x-www-form-urlencoded" {
			return nil, &Error{http.StatusUnsupportedMediaType, "bad_data", "POST bodies must be application/x-www-form-urlencoded"}
		}
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, badData("reading the request body: %v", err)
	}
	if int64(len(b)) > maxBody {
		return nil, &Error{http.StatusRequestEntityTooLarge, "bad_data", fmt.Sprintf("request body longer than %d bytes", maxBody)}
	}
	body, err := url.ParseQuery(string(b))
	if err != nil {
		return nil, badData("invalid form body: %v", err)
	}
	for k, vs := range body {
		form[k] = append(form[k], vs...)
	}
	return form, nil
}

// request is what was validated: canonical values, ready to forward.
type request struct {
	query   string
	matches []string
	values  url.Values // every other parameter, canonical
}

// validate checks the parameters ep takes and rewrites them to canonical
// form; the rest are dropped.
func validate(ep endpoint, form url.Values, maxLen int) (*request, error) {
	req := &request{values: url.Values{}}
	for _, p := range ep.params {
		vs := form[p]
		if len(vs) == 0 {
			continue
		}
		if p != pMatch && len(vs) > 1 {
			return nil, badData("parameter %s given %d times (in the URL and the body together): give it once", p, len(vs))
		}
		v := vs[0]
		switch p {
		case pQuery:
			if len(v) > maxLen {
				return nil, badData("query is %d bytes, more than the %d allowed", len(v), maxLen)
			}
			req.query = v
		case pMatch:
			if len(vs) > maxMatchers {
				return nil, badData("%d match[] selectors, more than the %d allowed", len(vs), maxMatchers)
			}
			for _, m := range vs {
				if len(m) > maxLen {
					return nil, badData("match[] selector is %d bytes, more than the %d allowed", len(m), maxLen)
				}
			}
			req.matches = vs
		case pTime, pStart, pEnd:
			t, err := parseTime(v)
			if err != nil {
				return nil, badData("invalid parameter %s: %v", p, err)
			}
			req.values.Set(p, t)
		case pStep, pTimeout:
			d, err := parseDuration(v)
			if err != nil {
				return nil, badData("invalid parameter %s: %v", p, err)
			}
			req.values.Set(p, d)
		case pLimit:
			n, err := strconv.ParseUint(v, 10, 31)
			if err != nil {
				return nil, badData("invalid parameter limit: want a non-negative integer")
			}
			req.values.Set(p, strconv.FormatUint(n, 10))
		}
	}
	if ep.query && strings.TrimSpace(req.query) == "" {
		return nil, badData("parameter query is required")
	}
	if ep.matchRequired && len(req.matches) == 0 {
		return nil, badData("parameter match[] is required")
	}
	return req, nil
}

// maxSeconds bounds times and durations to what int64 milliseconds and
// nanoseconds hold, so no upstream parses an overflowed value.
const maxSeconds = 9e9

// parseTime reads a time as Prometheus does (Unix seconds, or RFC 3339)
// and returns Unix seconds with millisecond precision.
func parseTime(s string) (string, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > maxSeconds {
			return "", errors.New("time out of range")
		}
		return strconv.FormatFloat(math.Round(f*1000)/1000, 'f', 3, 64), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "", fmt.Errorf("%q is neither Unix seconds nor RFC 3339", clip(s))
	}
	if u := t.Unix(); u > maxSeconds || u < -maxSeconds {
		return "", errors.New("time out of range")
	}
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64), nil
}

// parseDuration reads a duration as Prometheus does (seconds, or 1m30s)
// and returns it as Prometheus writes durations.
func parseDuration(s string) (string, error) {
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f > maxSeconds {
			return "", errors.New("duration out of range")
		}
		d = time.Duration(math.Round(f * float64(time.Second)))
	} else {
		md, err := model.ParseDuration(s)
		if err != nil {
			return "", fmt.Errorf("%q is neither seconds nor a duration such as 1m30s", clip(s))
		}
		d = time.Duration(md)
	}
	d = d.Round(time.Millisecond)
	if d <= 0 {
		return "", errors.New("must be positive (at least 1ms)")
	}
	return model.Duration(d).String(), nil
}
