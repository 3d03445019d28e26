package acct

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/units/access"
	"github.com/wattrace/wattrace/internal/units/api"
	"github.com/wattrace/wattrace/internal/units/unitstest"
	"github.com/wattrace/wattrace/pkg/units"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// uids are the test users' uids, as the fake munge encodes them and the
// server maps them back.
var uids = map[string]string{"alice": "1001", "bob": "1002", "carol": "1003"}

// server is the real API over a store holding unitstest.Fixture,
// accepting MUNGE credentials made for its URL (the fake commands of
// unitstest.FakeMunge) and bob's token; it trusts no address. It returns
// the URL and the munge command.
func server(t *testing.T) (string, string) {
	t.Helper()
	munge, unmunge := unitstest.FakeMunge(t)
	h := &switchable{}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	m, err := access.NewMunge(access.MungeConfig{Unmunge: unmunge, Audiences: []string{s.URL},
		LookupUser: func(uid string) (string, error) {
			for u, id := range uids {
				if id == uid {
					return u, nil
				}
			}
			return "", fmt.Errorf("no uid %s", uid)
		}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(unitstest.Store(t, unitstest.Fixture(now)), api.Config{
		Access: api.Access{
			UserHeader: api.DefaultUserHeader,
			Admins:     []string{"carol"},
			Tokens:     map[string]string{api.HashToken("tok-bob"): "bob"},
			Munge:      m,
		},
		Now: func() time.Time { return now },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.h = a.Handler()
	return s.URL, munge
}

// switchable lets the server's URL, known once it listens, go into the
// API's MUNGE audiences.
type switchable struct{ h http.Handler }

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }

func configFile(t *testing.T, url, munge string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "acct.yaml")
	if err := os.WriteFile(p, []byte("url: "+url+"\nmunge: "+munge+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runAs runs acct in this process as user, whose MUNGE credentials the
// fake munge makes with the user's uid.
func runAs(t *testing.T, user string, args ...string) (string, string, int) {
	t.Helper()
	t.Setenv("FAKE_MUNGE_UID", uids[user])
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb, Env{
		User: user, Now: func() time.Time { return now }, Location: time.UTC,
		Getenv: func(string) string { return "" },
	})
	return out.String(), errb.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", p, got, want)
	}
}

func TestGolden(t *testing.T) {
	url, munge := server(t)
	cfg := configFile(t, url, munge)
	day := "--starttime=2026-11-24"
	for _, c := range []struct {
		name, user string
		args       []string
	}{
		{"alice_table", "alice", []string{"--config", cfg, day}},
		{"alice_csv", "alice", []string{"--config", cfg, day, "--csv"}},
		{"alice_format", "alice", []string{"--config", cfg, day, "--format=jobid,user,state,end,energy,gpuenergy,co2e,cputime"}},
		{"alice_gpuidle", "alice", []string{"--config", cfg, day, "--format=jobid,gputime,gpuidle"}},
		{"bob_token", "bob", []string{"--url", url, "--token", "tok-bob", day}},
		{"carol_admin_all_users", "carol", []string{"--config", cfg, day, "--user=alice,bob,carol", "--format=jobid,user,project,state,energy"}},
		{"carol_project", "carol", []string{"--config", cfg, day, "--project=proj_a", "--user=alice,carol", "--format=jobid,user,project"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, code := runAs(t, c.user, c.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			golden(t, c.name, out)
		})
	}
}

// A user sees their own jobs only, and --user for someone else is refused
// by the server.
func TestOwnJobsOnly(t *testing.T) {
	url, munge := server(t)
	cfg := configFile(t, url, munge)
	out, stderr, code := runAs(t, "alice", "--config", cfg, "--starttime=now-2d", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var us []units.Unit
	if err := json.Unmarshal([]byte(out), &us); err != nil {
		t.Fatalf("--json does not parse: %v\n%s", err, out)
	}
	if len(us) != 2 {
		t.Fatalf("%d units, want alice's 2", len(us))
	}
	for _, u := range us {
		if u.User != "alice" {
			t.Errorf("unit %s of %s shown to alice", u.ID, u.User)
		}
	}
	if us[0].Figures.Joules() == 0 {
		t.Errorf("figures lost in --json: %+v", us[0].Figures)
	}
	_, stderr, code = runAs(t, "alice", "--config", cfg, "--user=bob")
	if code != 1 || !strings.Contains(stderr, "403") || !strings.Contains(stderr, "admins only") {
		t.Errorf("--user=bob as alice: exit %d %q, want the server's 403", code, stderr)
	}
	// A token is its user whatever the Unix user: bob's token as alice
	// asks for alice's jobs and is refused.
	_, stderr, code = runAs(t, "alice", "--url", url, "--token", "tok-bob")
	if code != 1 || !strings.Contains(stderr, "403") {
		t.Errorf("bob's token as alice: exit %d %q", code, stderr)
	}
}

func TestBadArguments(t *testing.T) {
	url, munge := server(t)
	cfg := configFile(t, url, munge)
	old := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(old, []byte("url: "+url+"\nusername: acct\npassword: pw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--config", old}, "username and password are no longer read", 1},
		{[]string{"--config", cfg, "--format=jobid,password"}, `unknown column "password"`, 2},
		{[]string{"--config", cfg, "--starttime=last tuesday"}, "--starttime", 2},
		{[]string{"--config", cfg, "--starttime=2026-11-24", "--endtime=2026-11-23"}, "is not before", 2},
		{[]string{"--config", cfg, "--json", "--csv"}, "exclude each other", 2},
		{[]string{"--config", cfg, "--starttime=2020-01-01"}, "longer than the maximum", 1},
		{[]string{"--config", cfg, "--job=1;drop"}, "invalid id", 1},
		{[]string{"--config", filepath.Join(t.TempDir(), "none.yaml")}, "reading the client configuration", 1},
		{[]string{"--url", url, "--munge", filepath.Join(t.TempDir(), "no-munge")}, "give --token or --cert", 1},
		{[]string{"--url", url, "--auth", "token"}, "give --token", 1},
		{[]string{"--url", url, "--auth", "cert"}, "give --cert and --key", 1},
		{[]string{"--url", url, "--auth", "password"}, "munge, token or cert", 2},
	} {
		_, stderr, code := runAs(t, "alice", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d %q, want %d with %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

func TestParseTime(t *testing.T) {
	for in, want := range map[string]string{
		"2026-11-02":          "2026-11-02T00:00:00Z",
		"2026-11-02T10:30":    "2026-11-02T10:30:00Z",
		"2026-11-02T10:30:05": "2026-11-02T10:30:05Z",
		"now-7d":              "2026-11-17T12:00:00Z",
		"now-3hours":          "2026-11-24T09:00:00Z",
		"now":                 "2026-11-24T12:00:00Z",
		"1762000000":          "2025-11-01T12:26:40Z",
	} {
		got, err := parseTime(in, now, time.UTC)
		if err != nil || got.UTC().Format(time.RFC3339) != want {
			t.Errorf("%s: %v %v, want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"now-", "now-7x", "now-d", "yesterday", "-5"} {
		if _, err := parseTime(in, now, time.UTC); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestDuration(t *testing.T) {
	for s, want := range map[float64]string{0: "00:00:00", 59.6: "00:01:00", 3661: "01:01:01", 90061: "1-01:01:01"} {
		if got := duration(s); got != want {
			t.Errorf("duration(%v) = %s, want %s", s, got, want)
		}
	}
}

func TestNumber(t *testing.T) {
	for _, c := range []struct {
		v    float64
		prec int
		want string
	}{{0, 4, "0.0000"}, {0.011, 4, "0.0110"}, {9.05e-7, 4, "9.05e-07"}, {0.00004, 4, "4.00e-05"}, {0.00005, 4, "0.0001"}, {12.5, 2, "12.50"}} {
		if got := number(c.v, c.prec); got != c.want {
			t.Errorf("number(%v, %d) = %s, want %s", c.v, c.prec, got, c.want)
		}
	}
}
