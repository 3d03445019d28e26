package access

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
)

func writeFile(t *testing.T, p, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// fakeUnmunge stands in for unmunge where no munged runs: its
// "credential" is base64 of unmunge's whole answer, so each test says
// what unmunge would have said. What the fake cannot show (that munged
// vouches for the uid) TestRealMunge and the end-to-end test show.
func fakeUnmunge(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "unmunge")
	writeFile(t, p, `#!/bin/sh
c=$(cat); c=${c#MUNGE:}; c=${c%:}
out=$(printf '%s' "$c" | base64 -d) || exit 1
case $out in EXIT*) echo "unmunge: Error: Expired credential" >&2; exit 15;; esac
printf '%s' "$out"
`, 0o755)
	return p
}

func fakeCred(status string, uid int, encoded time.Time, ttl int, payload any) string {
	b, _ := json.Marshal(payload)
	out := fmt.Sprintf("STATUS:          %s\nENCODE_TIME:     %d\nTTL:             %d\nUID:             %d\n\n%s",
		status, encoded.Unix(), ttl, uid, b)
	return "MUNGE:" + base64.StdEncoding.EncodeToString([]byte(out)) + ":"
}

func mungeRequest(cred, method, target string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.Header.Set("Authorization", "MUNGE "+cred)
	return r
}

func TestMungeFake(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	m, err := NewMunge(MungeConfig{
		Unmunge:   fakeUnmunge(t),
		Audiences: []string{"https://API.example:9842", "http://127.0.0.1:9842/ignored/path"},
		LookupUser: func(uid string) (string, error) {
			if n, ok := map[string]string{"1001": "alice", "1002": "bob"}[uid]; ok {
				return n, nil
			}
			return "", fmt.Errorf("no uid %s", uid)
		},
		Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &Access{UserHeader: header, Munge: m, Proxies: []string{"bob"}}
	const target = "/api/v1/units?kind=job&user=alice"
	good := MungePayload{V: 1, Audience: "https://api.example:9842", Method: "GET", Path: target}
	with := func(f func(*MungePayload)) MungePayload { p := good; f(&p); return p }
	for _, c := range []struct {
		name   string
		cred   string
		method string
		user   string // header
		want   string // user, or "" for a refusal
	}{
		{"alice's credential", fakeCred("0", 1001, now, 60, good), "GET", "", "alice"},
		{"alice's credential naming herself", fakeCred("0", 1001, now.Add(-time.Second), 60, good), "GET", "alice", "alice"},
		{"other spelling of the audience", fakeCred("0", 1001, now, 60, with(func(p *MungePayload) { p.Audience = "http://127.0.0.1:9842" })), "GET", "", "alice"},
		{"bob's credential claiming alice in the payload", fakeCred("0", 1002, now, 60, map[string]any{"v": 1, "aud": good.Audience, "method": "GET", "path": target, "user": "alice", "uid": 1001}), "GET", "", "bob"},
		{"bob's credential claiming alice in the header, bob being a proxy name", fakeCred("0", 1002, now.Add(-2*time.Second), 60, good), "GET", "alice", ""},
		{"made for another server", fakeCred("0", 1001, now, 60, with(func(p *MungePayload) { p.Audience = "https://evil.example:9842" })), "GET", "", ""},
		{"made for another path", fakeCred("0", 1001, now, 60, with(func(p *MungePayload) { p.Path = "/api/v1/units?kind=job&user=bob" })), "GET", "", ""},
		{"made for another method", fakeCred("0", 1001, now, 60, with(func(p *MungePayload) { p.Method = "POST" })), "GET", "", ""},
		{"no wattrace payload", fakeCred("0", 1001, now, 60, "hello"), "GET", "", ""},
		{"expired (status 15)", fakeCred("15", 1001, now, 60, good), "GET", "", ""},
		{"unmunge fails", "MUNGE:" + base64.StdEncoding.EncodeToString([]byte("EXIT")) + ":", "GET", "", ""},
		{"too long a TTL", fakeCred("0", 1001, now, 3600, good), "GET", "", ""},
		{"too old", fakeCred("0", 1001, now.Add(-10*time.Minute), 60, good), "GET", "", ""},
		{"unknown uid", fakeCred("0", 4242, now, 60, good), "GET", "", ""},
		{"not a credential", "MUNGE:$(reboot):", "GET", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := mungeRequest(c.cred, c.method, "http://api.example:9842"+target)
			if c.user != "" {
				r.Header.Set(header, c.user)
			}
			got, err := a.Identify(r)
			if c.want == "" {
				e, ok := err.(*Error)
				if !ok || (e.Status != 401 && e.Status != 403) {
					t.Fatalf("got %+v %v, want a refusal", got, err)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil || got.User != c.want || got.Method != MethodMunge || got.Principal != c.want {
				t.Fatalf("got %+v %v, want %s", got, err, c.want)
			}
		})
	}
	// The first case's credential again: this server's replay cache.
	cred := fakeCred("0", 1001, now, 60, good)
	if _, err := a.Identify(mungeRequest(cred, "GET", target)); err == nil || !strings.Contains(err.Error(), "replayed") {
		t.Errorf("replay: %v", err)
	}
}

// TestMungeBehindStripPrefix: behind http.StripPrefix (the query guard
// under /tsdb) a credential is checked against the request the client
// sent, prefix included: acct's credential for /tsdb/api/v1/query is
// accepted there, and one made for the unprefixed path is not.
func TestMungeBehindStripPrefix(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	m, err := NewMunge(MungeConfig{
		Unmunge: fakeUnmunge(t), Audiences: []string{"http://api.example:9842"},
		LookupUser: func(uid string) (string, error) { return map[string]string{"1001": "alice"}[uid], nil },
		Now:        func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &Access{UserHeader: header, Munge: m}
	var got Caller
	var gotErr error
	h := http.StripPrefix("/tsdb", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got, gotErr = a.Identify(r)
	}))
	const target = "/tsdb/api/v1/query?query=wattrace_job_energy_joules_total&time=1"
	for i, c := range []struct {
		path string
		want string
	}{
		{target, "alice"},
		{strings.TrimPrefix(target, "/tsdb"), ""},
	} {
		p := MungePayload{V: 1, Audience: "http://api.example:9842", Method: "GET", Path: c.path, Nonce: fmt.Sprint(i)}
		got, gotErr = Caller{}, nil
		h.ServeHTTP(httptest.NewRecorder(), mungeRequest(fakeCred("0", 1001, now, 60, p), "GET", target))
		if c.want != "" && (gotErr != nil || got.User != c.want) {
			t.Errorf("credential for %s: %+v %v, want %s", c.path, got, gotErr, c.want)
		}
		if c.want == "" && gotErr == nil {
			t.Errorf("credential for %s accepted on %s as %+v", c.path, target, got)
		}
	}
}

func TestNewMungeErrorsNameKeys(t *testing.T) {
	unm := fakeUnmunge(t)
	for _, c := range []struct {
		cfg MungeConfig
		key string
	}{
		{MungeConfig{Unmunge: unm}, "api.munge.audiences"},
		{MungeConfig{Unmunge: unm, Audiences: []string{"ftp://x"}}, "api.munge.audiences"},
		{MungeConfig{Unmunge: filepath.Join(t.TempDir(), "none"), Audiences: []string{"http://x"}}, "api.munge.unmunge"},
		{MungeConfig{Unmunge: unm, Audiences: []string{"http://x"}, MaxTTL: -time.Second}, "api.munge.max-ttl"},
	} {
		if _, err := NewMunge(c.cfg); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.key)
		}
	}
}

// At most MaxConcurrent unmunge processes run at once: two credentials
// checked together by a one-slot Munge take two runs' time.
func TestMungeConcurrency(t *testing.T) {
	slow := filepath.Join(t.TempDir(), "unmunge")
	writeFile(t, slow, "#!/bin/sh\ncat >/dev/null\nsleep 0.4\necho 'unmunge: Error: Invalid credential' >&2\nexit 14\n", 0o755)
	m, err := NewMunge(MungeConfig{Unmunge: slow, Audiences: []string{"http://x"}, MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := m.Verify(t.Context(), "MUNGE:abc:", httptest.NewRequest("GET", "/", nil))
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "Invalid credential") {
			t.Errorf("got %v, want unmunge's refusal", err)
		}
	}
	if d := time.Since(t0); d < 800*time.Millisecond {
		t.Errorf("two checks took %v: they ran at once", d)
	}
}

func TestAudience(t *testing.T) {
	for in, want := range map[string]string{
		"http://H:80":             "http://h:80",
		"https://h":               "https://h:443",
		"http://h/x?y":            "http://h:80",
		"https://[::1]:9842/api/": "https://[::1]:9842",
	} {
		if got, err := Audience(in); err != nil || got != want {
			t.Errorf("Audience(%q) = %q %v, want %q", in, got, err, want)
		}
	}
}

// TestRealMunge runs the real munge and unmunge against a munged of the
// test's own (testenv.Munged, on a private socket given to unmunge as
// api.munge.socket would): a credential made for this request is this
// process's user, and munged's own checks (replay, expiry, uid
// restriction) refuse the rest.
func TestRealMunge(t *testing.T) {
	socket := testenv.Munged(t)
	m, err := NewMunge(MungeConfig{Unmunge: "unmunge", Socket: socket, Audiences: []string{"http://api.example:9842"}})
	if err != nil {
		t.Fatal(err)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	a := &Access{UserHeader: header, Munge: m}
	const target = "/api/v1/units?kind=job"
	encode := func(args ...string) string {
		t.Helper()
		b, _ := json.Marshal(MungePayload{V: 1, Audience: "http://api.example:9842", Method: "GET", Path: target, Nonce: fmt.Sprint(time.Now().UnixNano())})
		cmd := exec.Command("munge", append([]string{"--socket=" + socket}, args...)...)
		cmd.Stdin = strings.NewReader(string(b))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("munge %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	cred := encode("-t", "60")
	got, err := a.Identify(mungeRequest(cred, "GET", target))
	if err != nil || got.User != me.Username {
		t.Fatalf("fresh credential: %+v %v, want %s", got, err, me.Username)
	}
	if _, err := a.Identify(mungeRequest(cred, "GET", target)); err == nil {
		t.Error("replayed credential accepted")
	} else {
		t.Logf("replay: %v", err)
	}
	restricted := encode("-t", "60", "-u", "4242")
	if _, err := a.Identify(mungeRequest(restricted, "GET", target)); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("credential restricted to uid 4242: %v", err)
	}
	// Without the socket unmunge asks munge's default one, which has
	// another key or no daemon: the setting is what reached ours.
	other, err := NewMunge(MungeConfig{Unmunge: "unmunge", Audiences: []string{"http://api.example:9842"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&Access{UserHeader: header, Munge: other}).Identify(mungeRequest(encode("-t", "60"), "GET", target)); err == nil {
		t.Error("a credential of the private munged accepted by unmunge on the default socket")
	} else {
		t.Logf("default socket: %v", err)
	}
	short := encode("-t", "1")
	time.Sleep(2500 * time.Millisecond)
	if _, err := a.Identify(mungeRequest(short, "GET", target)); err == nil || !strings.Contains(err.Error(), "Expired") {
		t.Errorf("expired credential: %v", err)
	}
}
