package api

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

var testNow = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func TestTimeRange(t *testing.T) {
	const max = 31 * 24 * time.Hour
	cases := []struct {
		q        string
		from, to string
		err      string
	}{
		{q: "", from: "2026-11-23T12:00:00Z", to: "2026-11-24T12:00:00Z"},
		{q: "from=2026-11-01T00:00:00Z&to=2026-11-02T00:00:00Z", from: "2026-11-01T00:00:00Z", to: "2026-11-02T00:00:00Z"},
		{q: "from=1762000000&to=1762000060.5", from: "2025-11-01T12:26:40Z", to: "2025-11-01T12:27:40.5Z"},
		{q: "from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z", err: "is not before"},
		{q: "from=2026-11-01T00:00:00Z&to=2026-11-01T00:00:00Z", err: "is not before"},
		{q: "from=2025-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", err: "longer than the maximum"},
		{q: "from=yesterday", err: "RFC 3339"},
		{q: "from=1e300", err: "a time from"},
		{q: "from=NaN", err: "a time from"},
		{q: "from=-5", err: "a time from"},
		{q: "to=9999-01-01T00:00:00Z", err: "a time from"},
		{q: "from=1&from=2", err: "at most once"},
	}
	for _, c := range cases {
		p, err := newParams(c.q, "from", "to")
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.timeRange(testNow, 24*time.Hour, max)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !isBadRequest(err) {
				t.Errorf("%q: error %v, want a bad request with %q", c.q, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.q, err)
			continue
		}
		if got := r.From.Format(time.RFC3339Nano) + " " + r.To.Format(time.RFC3339Nano); got != c.from+" "+c.to {
			t.Errorf("%q: %s, want %s %s", c.q, got, c.from, c.to)
		}
	}
}

func TestNamesRefuseSQL(t *testing.T) {
	for _, v := range []string{
		"alice'--", "a;DROP TABLE units", `a"b`, "a b", "%", "a%25", "-x", "", "a/b", "a\x00", "a*", strings.Repeat("a", 129),
	} {
		p, err := newParams("user="+url.QueryEscape(v), "user")
		if err != nil {
			if !isBadRequest(err) {
				t.Errorf("%q: %v", v, err)
			}
			continue
		}
		if got, err := p.names("user"); err == nil || !isBadRequest(err) {
			t.Errorf("user=%q accepted as %q", v, got)
		}
	}
	p, _ := newParams("user=alice,bob&user=alice&user=c.d-e_f@x", "user")
	got, err := p.names("user")
	if err != nil || strings.Join(got, " ") != "alice bob c.d-e_f@x" {
		t.Errorf("names %q, %v", got, err)
	}
}

func TestUnknownParameterAndField(t *testing.T) {
	if _, err := newParams("user=a&usr=b", "user"); err == nil || !strings.Contains(err.Error(), `unknown parameter "usr"`) {
		t.Errorf("unknown parameter: %v", err)
	}
	p, _ := newParams("fields=id,energy_joules,password", "fields")
	if _, err := p.fields([]string{"id", "energy_joules"}); err == nil || !strings.Contains(err.Error(), `unknown field "password"`) {
		t.Errorf("unknown field: %v", err)
	}
	p, _ = newParams("kind=job,batch", "kind")
	if _, err := p.kinds(); err == nil || !strings.Contains(err.Error(), `invalid kind "batch"`) {
		t.Errorf("kind: %v", err)
	}
	p, _ = newParams("running=maybe", "running")
	if _, err := p.boolean("running"); err == nil {
		t.Error("running=maybe accepted")
	}
}

// PBS jobs: the kind, and ids as qstat writes them, an array subjob's
// index in brackets; brackets go no further than that form.
func TestPBSKindAndIDs(t *testing.T) {
	p, _ := newParams("kind=pbs_job,job", "kind")
	if got, err := p.kinds(); err != nil || strings.Join(got, ",") != "pbs_job,job" {
		t.Errorf("kinds %q, %v", got, err)
	}
	p, _ = newParams("id="+url.QueryEscape("123[4].pbs01,4711.pbs01.example.org,42"), "id")
	if got, err := p.ids("id"); err != nil || strings.Join(got, " ") != "123[4].pbs01 4711.pbs01.example.org 42" {
		t.Errorf("ids %q, %v", got, err)
	}
	for _, v := range []string{"a[1]", "123[4]", "[1].x", "1[2][3].x", "1[a].x", "1[2].x y"} {
		p, _ := newParams("id="+url.QueryEscape(v), "id")
		if got, err := p.ids("id"); err == nil {
			t.Errorf("id=%q accepted as %q", v, got)
		}
	}
	// User names keep their own rule: no brackets.
	p, _ = newParams("user="+url.QueryEscape("123[4].pbs01"), "user")
	if _, err := p.names("user"); err == nil {
		t.Error("a user name with brackets accepted")
	}
}
