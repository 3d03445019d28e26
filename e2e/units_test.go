//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/internal/units/access"
	"github.com/wattrace/wattrace/internal/units/api"
	"github.com/wattrace/wattrace/pkg/units"
)

var (
	apiBuildOnce sync.Once
	apiBin       string
	apiBuildErr  error
)

// apiBinary builds ./cmd/wattrace-api once per test binary.
func apiBinary(t *testing.T) string {
	t.Helper()
	apiBuildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "wattrace-e2e-api-")
		if err != nil {
			apiBuildErr = err
			return
		}
		apiBin = filepath.Join(dir, "wattrace-api")
		cmd := exec.Command(goCmd(), "build", "-o", apiBin, "./cmd/wattrace-api")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			apiBuildErr = fmt.Errorf("go build ./cmd/wattrace-api: %v\n%s", err, out)
		}
	})
	if apiBuildErr != nil {
		t.Fatal(apiBuildErr)
	}
	return apiBin
}

func goCmd() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// apiServer is one running wattrace-api.
type apiServer struct {
	name string
	// basic: credentials its web config requires (user, password), if any.
	basic *[2]string
	port  int
	args  []string
	log   string
	cmd   *exec.Cmd
	t     *testing.T
}

func (s *apiServer) url() string { return fmt.Sprintf("http://127.0.0.1:%d", s.port) }

// start runs the server (again) with its arguments and waits for /health.
func (s *apiServer) start() {
	t := s.t
	t.Helper()
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(apiBinary(t), s.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	s.cmd = cmd
	t.Logf("%s: wattrace-api pid %d %s", s.name, cmd.Process.Pid, strings.Join(s.args, " "))
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, s.url()+"/health", nil)
		if s.basic != nil {
			req.SetBasicAuth(s.basic[0], s.basic[1])
		}
		if resp, err := httpClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	tailFile(t, s.log, 40)
	t.Fatalf("%s: wattrace-api did not answer /health within 60 s", s.name)
}

// stop ends the server with SIGTERM (it must exit within 20 s).
func (s *apiServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			s.t.Errorf("%s: wattrace-api exited with %v", s.name, err)
		}
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
		s.t.Errorf("%s: wattrace-api did not stop on SIGTERM within 20 s", s.name)
	}
	s.cmd = nil
}

// get asks path as user (header) from loopback; it returns the status and
// the envelope's data.
func (s *apiServer) get(path, user string) (int, json.RawMessage, string) {
	req, _ := http.NewRequest(http.MethodGet, s.url()+path, nil)
	if s.basic != nil {
		req.SetBasicAuth(s.basic[0], s.basic[1])
	}
	if user != "" {
		req.Header.Set(api.DefaultUserHeader, user)
	}
	return do(req)
}

func do(req *http.Request) (int, json.RawMessage, string) {
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Data  json.RawMessage
		Error string
	}
	_ = json.Unmarshal(b, &env)
	return resp.StatusCode, env.Data, env.Error
}

// unitView is a unit as the API answers it.
type unitView struct {
	units.Unit
	Totals struct {
		Joules, CPUSeconds float64
	} `json:"totals"`
}

func (v *unitView) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &v.Unit); err != nil {
		return err
	}
	var t struct {
		Totals struct {
			Joules     float64 `json:"joules"`
			CPUSeconds float64 `json:"cpu_seconds"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return err
	}
	v.Totals.Joules, v.Totals.CPUSeconds = t.Totals.Joules, t.Totals.CPUSeconds
	return nil
}

// units lists the jobs since from as user.
func (s *apiServer) units(user string, from time.Time) (map[string]unitView, error) {
	code, data, msg := s.get("/api/v1/units?kind=job&from="+strconv.FormatInt(from.Unix(), 10), user)
	if code != 200 {
		return nil, fmt.Errorf("%s: units as %s: %d %s", s.name, user, code, msg)
	}
	var us []unitView
	if err := json.Unmarshal(data, &us); err != nil {
		return nil, err
	}
	out := map[string]unitView{}
	for _, u := range us {
		out[u.ID] = u
	}
	return out, nil
}

// e2eJob is a job the test submits.
type e2eJob struct {
	key, user, account, script string
	id                         string
}

// sacctRow is what sacct says about a job (allocation line).
type sacctRow struct {
	user, account, state string
	start, end           time.Time
	totalCPU             float64
}

// sacct reads one job's line in UTC (not -X: its TotalCPU is the
// steps' sum, which -X leaves out).
func sacct(t *testing.T, id string) sacctRow {
	t.Helper()
	out, err := run(30*time.Second, []string{"TZ=UTC", "SLURM_TIME_FORMAT=%Y-%m-%dT%H:%M:%S"},
		"sacct", "-n", "-P", "-j", id, "-o", "JobID,User,Account,State,Start,End,TotalCPU")
	if err != nil {
		t.Fatalf("sacct: %v", err)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) != 7 || f[0] != id {
			continue
		}
		r := sacctRow{user: f[1], account: f[2], state: strings.Fields(f[3] + " ")[0]}
		r.start, _ = time.ParseInLocation("2006-01-02T15:04:05", f[4], time.UTC)
		r.end, _ = time.ParseInLocation("2006-01-02T15:04:05", f[5], time.UTC)
		r.totalCPU = slurmDuration(f[6])
		return r
	}
	t.Fatalf("sacct has no line for job %s:\n%s", id, out)
	return sacctRow{}
}

// slurmDuration parses sacct's [D-][HH:]MM:SS[.mmm].
func slurmDuration(s string) float64 {
	var days float64
	if d, rest, ok := strings.Cut(s, "-"); ok {
		n, _ := strconv.ParseFloat(d, 64)
		days, s = n, rest
	}
	parts := strings.Split(s, ":")
	var v float64
	for _, p := range parts {
		f, _ := strconv.ParseFloat(p, 64)
		v = v*60 + f
	}
	return days*86400 + v
}

// promJoules is a job's energy as Prometheus stored the exporter's
// counters: per series, the first sample from 0 plus every increase (a
// drop is a reset), summed over the zones that count each joule once.
// logRawSeries logs what a server counted for a job, zone by zone, and the
// raw samples its TSDB holds for the job's energy series, so that a
// mismatch says which series or sample the server counted differently.
func logRawSeries(t *testing.T, s *apiServer, jobID string, u unitView, at time.Time, window time.Duration) {
	t.Helper()
	t.Logf("%s job %s: energy as counted: %+v", s.name, jobID, u.Figures.Energy)
	tsdb := ""
	for _, a := range s.args {
		if v, ok := strings.CutPrefix(a, "--tsdb.url="); ok {
			tsdb = v
		}
	}
	q := url.Values{}
	q.Set("query", fmt.Sprintf(`{__name__=~"wattrace_job_(energy_joules|cpu_seconds)_total",job_id=%q}[%ds]`, jobID, int(window.Seconds())))
	q.Set("time", strconv.FormatInt(at.Unix(), 10))
	resp, err := httpClient.Get(tsdb + "/api/v1/query?" + q.Encode())
	if err != nil {
		t.Logf("%s job %s: raw samples: %v", s.name, jobID, err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	t.Logf("%s job %s: raw samples from %s: %s", s.name, jobID, tsdb, b)
}

func promJoules(t *testing.T, base, jobID string, at time.Time, window time.Duration) (float64, int) {
	t.Helper()
	q := url.Values{}
	q.Set("query", fmt.Sprintf(`wattrace_job_energy_joules_total{job_id=%q}[%ds]`, jobID, int(window.Seconds())))
	q.Set("time", strconv.FormatInt(at.Unix(), 10))
	resp, err := httpClient.Get(base + "/api/v1/query?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Metric map[string]string
				Values [][2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	byZone := map[string]float64{}
	samples := 0
	for _, s := range r.Data.Result {
		var prev, sum float64
		for i, v := range s.Values {
			f, _ := strconv.ParseFloat(v[1].(string), 64)
			if i == 0 || f < prev {
				sum += f
			} else {
				sum += f - prev
			}
			prev = f
			samples++
		}
		byZone[s.Metric["zone"]] += sum
	}
	var zones []string
	for z := range byZone {
		zones = append(zones, z)
	}
	var total float64
	for _, z := range units.TotalZones(zones) {
		total += byZone[z]
	}
	return total, samples
}

// otherAddress is a non-loopback IPv4 address of this machine, for a
// request the API must not trust.
func otherAddress(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP
		}
	}
	t.Fatal("no non-loopback IPv4 address to send an untrusted request from")
	return nil
}

// TestUnitsSlurm: a real single-node Slurm with accounting (MariaDB,
// slurmdbd), the real exporter in BPF mode, a real Prometheus scraping it
// and remote-writing to a real VictoriaMetrics, and three wattrace-api
// servers reading them: A on SQLite and Prometheus (restarted mid-way), B
// on PostgreSQL and Prometheus with Slurm's metadata from slurmrestd, C
// on SQLite and VictoriaMetrics (which is stopped for more than a cycle);
// A and C read sacct. Four jobs from alice (proj_a) and bob
// (proj_b): a multi-step one, one spawning many short processes, a
// cancelled one and one still running at check time. On every server:
//   - each ended job's energy equals the increase of the exporter's
//     counters as Prometheus stored them, within 1%;
//   - CPU seconds are within 2% of sacct's TotalCPU (of the job cgroup's
//     cpuacct.usage for the cancelled job, which sacct does not record);
//     state, start, end, user and account equal sacct's; the running job
//     is running;
//
// on A: alice gets 403 for bob's job, her list holds only her jobs, carol
// (admin) sees all four, a forged user header from an untrusted address
// is refused, and `wattrace acct` run as alice prints her jobs only and
// its --json parses; on C: while the TSDB is down units go pending and no
// unit's energy ever drops or is zeroed; on D, which accepts MUNGE and
// trusts no address: checkAcctMunge.
func TestUnitsSlurm(t *testing.T) {
	requireRoot(t)
	slurmLock(t)
	if _, err := os.Stat("/sys/fs/cgroup/cpuacct/cpuacct.usage"); err != nil {
		t.Fatalf("Slurm's cgroup/v1 plugin needs the v1 cpuacct controller: %v", err)
	}
	promBin := testenv.Tool(t, "prometheus", "prometheus")
	resetSlurmAccounting(t)
	begin := time.Now().Add(-time.Minute)

	bed := startUnitsTSDBs(t, promBin)
	bed.writeSecrets()
	bed.startServers()
	servers := []*apiServer{bed.a, bed.b, bed.c}

	jobs := unitsJobs()
	byKey := submitUnitsJobs(t, jobs)
	submitted := time.Now()
	samplers := sampleJobCgroups(t, jobs)

	// Watch C's figures throughout: never down, never back to zero.
	watch := newWatcher(t, bed.c, begin)
	defer watch.stop()

	cancelAndRestartA(t, bed.a, byKey["cancelled"].id)
	checkTSDBOutage(t, bed.c, bed.vm, begin, byKey["running"].id)

	// Wait for the three ended jobs to end in Slurm and be final with
	// Slurm's metadata on every server.
	ended := []*e2eJob{byKey["multistep"], byKey["short"], byKey["cancelled"]}
	waitEndedFinal(t, servers, ended, begin, submitted)
	now := time.Now()
	ref := &unitsReference{prom: bed.prom, exp: bed.exp, samplers: samplers, logFrom: bed.a,
		begin: begin, now: now, window: now.Sub(begin) + time.Minute}
	for _, s := range servers {
		ref.checkServer(t, s, ended, byKey["running"])
	}
	if byKey["cancelled"].id != "" {
		if st := sacct(t, byKey["cancelled"].id).state; st != "CANCELLED" {
			t.Errorf("the cancelled job is %s in sacct", st)
		}
	}

	checkAccess(t, bed.a, byKey, begin)
	checkAcct(t, bed.a, bed.e, bed.guardTokens["alice"], byKey)
	checkAcctMunge(t, bed.d, byKey, "")
	at := guardAt(t, bed.prom, byKey, submitted, submitted.Add(2*time.Minute))
	checkGuard(t, bed.a, bed.prom, bed.guardTokens, byKey, at)
	checkGuardMunge(t, bed.d, byKey, at)
	watch.stop()
	watch.check()
}

// resetSlurmAccounting brings the Slurm bed up with accounting (MariaDB,
// slurmdbd), fresh, with the users alice, bob and carol, and registers its
// clean-up (which shows the controller's and slurmdbd's logs when the
// test failed).
func resetSlurmAccounting(t *testing.T) {
	t.Helper()
	t.Setenv("SLURM_E2E_ACCOUNTING", "1")
	t.Cleanup(func() {
		if t.Failed() {
			tailFile(t, "/var/log/slurm/slurmctld.log", 20)
			tailFile(t, "/var/log/slurm/slurmdbd.log", 20)
		}
		if _, err := script(t, 3*time.Minute, "slurm.sh", "clean"); err != nil {
			t.Errorf("slurm.sh clean: %v", err)
		}
	})
	if _, err := script(t, 12*time.Minute, "slurm.sh", "reset"); err != nil {
		t.Fatalf("slurm.sh reset: %v", err)
	}
	if _, err := script(t, 2*time.Minute, "slurm.sh", "users"); err != nil {
		t.Fatalf("slurm.sh users: %v", err)
	}
}

// unitsBed is what TestUnitsSlurm's servers read: the exporter, the TSDBs
// holding its series, the files of secrets, and the servers themselves.
type unitsBed struct {
	t    *testing.T
	dir  string
	e    *exporter
	exp  *exporterWatch // the exporter's counters, scraped directly
	vm   *testenv.VictoriaMetrics
	prom string // Prometheus's base URL

	dsnFile     string            // PostgreSQL's DSN, for B
	tokens      string            // the API tokens file
	guardTokens map[string]string // each user's API token

	a, b, c, d *apiServer
}

// startUnitsTSDBs starts the exporter in BPF mode, VictoriaMetrics, and a
// Prometheus scraping the exporter every 2 s and remote-writing to
// VictoriaMetrics.
func startUnitsTSDBs(t *testing.T, promBin string) *unitsBed {
	t.Helper()
	// Ended jobs' series go 15 s after the job, so the updater sees
	// them end within the test.
	exporterAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	bed := &unitsBed{t: t}
	bed.e = startExporterAt(t, exporterAddr, "--accounting.mode=bpf", "--stats.retention=15s")
	bed.exp = watchExporter(t, bed.e)
	bed.vm = testenv.StartVictoriaMetrics(t)
	bed.dir = t.TempDir()
	bed.prom = startPrometheus(t, promBin, bed.dir, "units", fmt.Sprintf(`
global: {scrape_interval: 2s}
scrape_configs:
  - job_name: wattrace
    static_configs: [{targets: ["%s"]}]
remote_write:
  - url: %s/api/v1/write
    queue_config: {batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 1s}
`, exporterAddr, bed.vm.URL))
	return bed
}

// writeSecrets starts PostgreSQL and writes its DSN, and the tokens file
// of alice, bob and carol.
func (bed *unitsBed) writeSecrets() {
	t := bed.t
	t.Helper()
	dsn := testenv.Postgres(t)
	bed.dsnFile = filepath.Join(bed.dir, "pg.dsn")
	if err := os.WriteFile(bed.dsnFile, []byte(dsn), 0o600); err != nil {
		t.Fatal(err)
	}
	const aliceToken = "alice-e2e-token"
	// bob's and carol's tokens are for A's query guard (checkGuard).
	bed.guardTokens = map[string]string{"alice": aliceToken, "bob": "bob-e2e-token", "carol": "carol-e2e-token"}
	bed.tokens = filepath.Join(bed.dir, "tokens.yaml")
	var tokensYAML string
	for _, u := range []string{"alice", "bob", "carol"} {
		tokensYAML += u + ": " + api.HashToken(bed.guardTokens[u]) + "\n"
	}
	if err := os.WriteFile(bed.tokens, []byte(tokensYAML), 0o644); err != nil {
		t.Fatal(err)
	}
}

// commonArgs are every server's arguments: the TSDB it reads and how far
// behind it reads, sacct for Slurm's metadata, the tokens, carol an admin.
func (bed *unitsBed) commonArgs(tsdb string, delay time.Duration) []string {
	return []string{"--cluster=e2e", "--tsdb.url=" + tsdb, "--updater.interval=2s", "--updater.delay=" + delay.String(),
		"--updater.lookback=30m", "--slurm.source=sacct", "--slurm.interval=1m", "--slurm.lookback=1h",
		"--api.trusted-proxies=127.0.0.1", "--api.admins=carol", "--api.tokens-file=" + bed.tokens, "--log.level=debug"}
}

// newServerAt starts a wattrace-api on port and registers its stop (which
// shows its log when the test failed).
func (bed *unitsBed) newServerAt(name string, port int, basic *[2]string, args ...string) *apiServer {
	t := bed.t
	t.Helper()
	s := &apiServer{name: name, basic: basic, port: port, log: filepath.Join(bed.dir, name+".log"), t: t}
	s.args = append([]string{fmt.Sprintf("--web.listen-address=0.0.0.0:%d", s.port)}, args...)
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			tailFile(t, s.log, 40)
		}
	})
	s.start()
	return s
}

// startServers starts slurmrestd and the four servers: A (SQLite,
// Prometheus, the query guard), B (PostgreSQL, Prometheus, slurmrestd),
// C (SQLite, VictoriaMetrics) and D (MUNGE, no trusted address, the query
// guard).
func (bed *unitsBed) startServers() {
	t := bed.t
	t.Helper()
	// A and D serve the query guard under /tsdb, in front of Prometheus.
	guardArgs := []string{"--guard.upstream=" + bed.prom, "--guard.public=wattrace_node_.*"}
	// B reads Slurm through slurmrestd (JWT of carol, a Slurm admin),
	// A and C through sacct.
	if _, err := script(t, time.Minute, "slurm.sh", "restd"); err != nil {
		t.Fatalf("slurm.sh restd: %v", err)
	}
	jwt, err := run(30*time.Second, nil, "scontrol", "token", "username=carol", "lifespan=3600")
	if err != nil {
		t.Fatal(err)
	}
	jwtFile := filepath.Join(bed.dir, "slurm.jwt")
	if err := os.WriteFile(jwtFile, []byte(strings.TrimPrefix(jwt, "SLURM_JWT=")), 0o600); err != nil {
		t.Fatal(err)
	}
	bed.a = bed.newServerAt("A", freePort(t), nil, append(append(bed.commonArgs(bed.prom, 4*time.Second), "--store.path="+filepath.Join(bed.dir, "a.db")), guardArgs...)...)
	bArgs := append(bed.commonArgs(bed.prom, 4*time.Second), "--store.driver=postgres", "--store.dsn-file="+bed.dsnFile,
		"--slurm.source=restd", "--slurm.restd.url=http://127.0.0.1:6820", "--slurm.restd.user=carol", "--slurm.restd.token-file="+jwtFile)
	bed.b = bed.newServerAt("B", freePort(t), nil, bArgs...)
	// Remote write catches up after the outage: read further behind.
	bed.c = bed.newServerAt("C", freePort(t), nil, append(bed.commonArgs(bed.vm.URL, 12*time.Second), "--store.path="+filepath.Join(bed.dir, "c.db"))...)
	// D accepts MUNGE credentials made for its URL and trusts no address:
	// `wattrace acct` as the users run it on a Slurm cluster.
	dPort := freePort(t)
	dArgs := append(bed.commonArgs(bed.prom, 4*time.Second), "--store.path="+filepath.Join(bed.dir, "d.db"),
		"--api.munge.enabled", fmt.Sprintf("--api.munge.audiences=http://127.0.0.1:%d", dPort))
	dArgs = append(dArgs, guardArgs...)
	for i, arg := range dArgs {
		if strings.HasPrefix(arg, "--api.trusted-proxies=") {
			dArgs = slices.Delete(dArgs, i, i+1)
			break
		}
	}
	bed.d = bed.newServerAt("D", dPort, nil, dArgs...)
}

// unitsJobs are the test's jobs: a multi-step one and a cancelled one of
// alice's, one spawning many short processes and one still running at
// check time of bob's. Output nowhere: the users can't write the test's
// dirs.
func unitsJobs() []*e2eJob {
	burn := func(s int) string { return fmt.Sprintf(`timeout %d sh -c 'while :; do :; done'`, s) }
	return []*e2eJob{
		{key: "multistep", user: "alice", account: "proj_a",
			script: "#!/bin/sh\nsrun -n1 " + burn(4) + "\nsrun -n1 " + burn(3) + "\nsleep 1\n"},
		{key: "short", user: "bob", account: "proj_b",
			script: "#!/bin/sh\ni=0\nwhile [ $i -lt 1500 ]; do /bin/sh -c 'j=0; while [ $j -lt 200 ]; do j=$((j+1)); done'; i=$((i+1)); done\nsleep 1\n"},
		{key: "cancelled", user: "alice", account: "proj_a", script: "#!/bin/sh\n" + burn(300) + "\n"},
		{key: "running", user: "bob", account: "proj_b",
			script: "#!/bin/sh\nwhile :; do timeout 0.2 sh -c 'while :; do :; done'; sleep 0.5; done\n"},
	}
}

// submitUnitsJobs submits each job as its user and returns them by key.
func submitUnitsJobs(t *testing.T, jobs []*e2eJob) map[string]*e2eJob {
	t.Helper()
	byKey := map[string]*e2eJob{}
	for _, j := range jobs {
		// sbatch reads the script from stdin: the users can't read the
		// test's directory.
		cmd := exec.Command("runuser", "-u", j.user, "--", "sbatch", "--parsable", "-A", j.account,
			"-J", "e2e-"+j.key, "--chdir=/tmp", "-o", "/dev/null", "-e", "/dev/null", "-n", "1")
		cmd.Stdin = strings.NewReader(j.script)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sbatch %s as %s: %v %s", j.key, j.user, err, out)
		}
		id := strings.TrimSpace(string(out))
		j.id = strings.Split(id, ";")[0]
		byKey[j.key] = j
		t.Logf("job %s: %s as %s in %s", j.id, j.key, j.user, j.account)
	}
	return byKey
}

// sampleJobCgroups polls the job cgroups' own CPU time until Slurm removes
// them: the reference for the cancelled job, whose TotalCPU sacct does not
// record (Slurm 22.05 with jobacct_gather/cgroup gives a killed batch
// step 0.003 s where its cgroup counted 0.48 s). It returns the samplers
// by job key.
func sampleJobCgroups(t *testing.T, jobs []*e2eJob) map[string]*slurmJob {
	t.Helper()
	samplers := map[string]*slurmJob{}
	for _, j := range jobs {
		u, err := user.Lookup(j.user)
		if err != nil {
			t.Fatal(err)
		}
		sj := &slurmJob{name: j.key, user: j.user, uid: u.Uid, id: j.id}
		done := make(chan struct{})
		go sj.sample(time.Now().Add(4*time.Minute), done)
		samplers[j.key] = sj
	}
	return samplers
}

// cancelAndRestartA cancels a job 8 s in, then restarts A mid-way: what
// it counted stays, nothing twice.
func cancelAndRestartA(t *testing.T, a *apiServer, cancelled string) {
	t.Helper()
	time.Sleep(8 * time.Second)
	if _, err := run(20*time.Second, nil, "scancel", cancelled); err != nil {
		t.Fatalf("scancel: %v", err)
	}
	time.Sleep(3 * time.Second)
	a.stop()
	time.Sleep(5 * time.Second)
	a.start()
}

// checkTSDBOutage: the TSDB of C goes away for more than a cycle, once C
// counts the running job (under load C, 12 s behind, may not have seen it
// yet, and a unit it never saw cannot go pending); the job must go
// pending meanwhile.
func checkTSDBOutage(t *testing.T, c *apiServer, vm *testenv.VictoriaMetrics, begin time.Time, running string) {
	t.Helper()
	waitRunning(t, c, begin, 60*time.Second, running)
	vm.Stop()
	pendingSeen := waitPending(t, c, begin, 30*time.Second, running)
	vm.Start()
	if !pendingSeen {
		t.Errorf("C: the running job %s did not go pending while its TSDB was down", running)
	}
}

// waitEndedFinal waits, within 5 minutes, for the ended jobs to end in
// Slurm and be final with Slurm's metadata on every server.
func waitEndedFinal(t *testing.T, servers []*apiServer, ended []*e2eJob, begin, submitted time.Time) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for _, s := range servers {
		for {
			us, err := s.units("carol", begin)
			ready := err == nil
			for _, j := range ended {
				u, ok := us[j.id]
				if !ok || u.Status != units.StatusFinal || u.State == "RUNNING" || u.State == "ENDED" || u.State == "" || u.End.IsZero() {
					ready = false
				}
			}
			if ready {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: ended jobs not final with Slurm's metadata after %v: %v %+v", s.name, time.Since(submitted).Round(time.Second), err, us)
			}
			time.Sleep(2 * time.Second)
		}
	}
}

// unitsReference is what a server's figures are checked against.
type unitsReference struct {
	prom     string               // Prometheus, whose stored counters give each job's energy
	exp      *exporterWatch       // the exporter's final counters, scraped directly
	samplers map[string]*slurmJob // the job cgroups' cpuacct.usage, by job key
	logFrom  *apiServer           // the server whose agreement with the exporter is logged
	begin    time.Time            // the units asked for start after it
	now      time.Time            // when Prometheus's counters are read
	window   time.Duration        // how far back from now they are read
}

// checkServer checks each ended job on s, and that the running job is
// running with energy.
func (r *unitsReference) checkServer(t *testing.T, s *apiServer, ended []*e2eJob, running *e2eJob) {
	t.Helper()
	us, err := s.units("carol", r.begin)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range ended {
		r.checkEnded(t, s, j, us[j.id])
	}
	u := us[running.id]
	if u.Status != units.StatusRunning || !u.End.IsZero() || u.Totals.Joules <= 0 {
		t.Errorf("%s: the running job %s: status %s end %v joules %v", s.name, running.id, u.Status, u.End, u.Totals.Joules)
	}
}

// checkEnded checks an ended job u on s: its energy within 1% of
// Prometheus's counters and of the exporter's own, its CPU within 2% of
// sacct's TotalCPU (of its cgroup's cpuacct.usage when cancelled), and
// its state, project, user, start and end sacct's.
func (r *unitsReference) checkEnded(t *testing.T, s *apiServer, j *e2eJob, u unitView) {
	t.Helper()
	sa := sacct(t, j.id)
	want, n := promJoules(t, r.prom, j.id, r.now, r.window)
	if want <= 0 || !within(u.Totals.Joules, want, 0.01) {
		t.Errorf("%s job %s (%s): energy %.3f J, Prometheus's counters say %.3f J (%.2f%% off, want ≤ 1%%)",
			s.name, j.id, j.key, u.Totals.Joules, want, 100*testenv.RelDiff(u.Totals.Joules, want))
		logRawSeries(t, s, j.id, u, r.now, r.window)
	}
	// The exporter's own final counters, scraped directly: a
	// reference that does not go through any TSDB.
	if direct := r.exp.joules(j.id); direct <= 0 || !within(u.Totals.Joules, direct, 0.01) {
		t.Errorf("%s job %s (%s): energy %.3f J, the exporter's final counters %.3f J", s.name, j.id, j.key, u.Totals.Joules, direct)
	} else if s == r.logFrom {
		t.Logf("job %s (%s): the exporter's final counters %.3f J (%.3f%% from the API's)", j.id, j.key, direct, 100*testenv.RelDiff(u.Totals.Joules, direct))
	}
	ref, what := sa.totalCPU, "sacct TotalCPU"
	if j.key == "cancelled" {
		sj := r.samplers[j.key]
		sj.mu.Lock()
		ref, what = float64(sj.usage)/1e9, fmt.Sprintf("the job cgroup's last cpuacct.usage (sacct says %.3f s)", sa.totalCPU)
		sj.mu.Unlock()
	}
	t.Logf("%s job %s (%s): energy API %.3f J, Prometheus %.3f J (%d samples, %.3f%% off); CPU API %.3f s, %s %.3f s (%.2f%% off); state %s/%s",
		s.name, j.id, j.key, u.Totals.Joules, want, n, 100*testenv.RelDiff(u.Totals.Joules, want),
		u.Totals.CPUSeconds, what, ref, 100*testenv.RelDiff(u.Totals.CPUSeconds, ref), u.State, sa.state)
	if ref <= 0 || !within(u.Totals.CPUSeconds, ref, 0.02) {
		t.Errorf("%s job %s (%s): CPU %.3f s, %s %.3f s (%.2f%% off, want ≤ 2%%)",
			s.name, j.id, j.key, u.Totals.CPUSeconds, what, ref, 100*testenv.RelDiff(u.Totals.CPUSeconds, ref))
	}
	if u.State != sa.state || u.Project != sa.account || u.User != sa.user ||
		!u.Start.Equal(sa.start) || !u.End.Equal(sa.end) {
		t.Errorf("%s job %s (%s): state %q project %q user %q %s–%s; sacct %q %q %q %s–%s", s.name, j.id, j.key,
			u.State, u.Project, u.User, u.Start.Format(time.RFC3339), u.End.Format(time.RFC3339),
			sa.state, sa.account, sa.user, sa.start.Format(time.RFC3339), sa.end.Format(time.RFC3339))
	}
}

// checkAccess: 403 for another's job, own list only, admin sees all, a
// forged header from an untrusted address refused.
func checkAccess(t *testing.T, a *apiServer, jobs map[string]*e2eJob, begin time.Time) {
	t.Helper()
	bobs := jobs["short"].id
	if code, _, msg := a.get("/api/v1/units/"+bobs, "alice"); code != 403 {
		t.Errorf("alice asking for bob's job %s: %d %s, want 403", bobs, code, msg)
	}
	if code, _, _ := a.get("/api/v1/units/"+jobs["multistep"].id, "alice"); code != 200 {
		t.Errorf("alice asking for her job: %d", code)
	}
	mine, err := a.units("alice", begin)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for id, u := range mine {
		got = append(got, id)
		if u.User != "alice" {
			t.Errorf("alice's list holds %s of %s", id, u.User)
		}
	}
	sort.Strings(got)
	want := []string{jobs["multistep"].id, jobs["cancelled"].id}
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("alice's jobs %v, want %v", got, want)
	}
	all, err := a.units("carol", begin)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if _, ok := all[j.id]; !ok {
			t.Errorf("admin carol does not see job %s (%s)", j.id, j.key)
		}
	}
	// The same request, sent from this machine's other address: untrusted.
	ip := otherAddress(t)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext}}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, fmt.Sprintf("http://%s:%d/api/v1/units?kind=job", ip, a.port), nil)
	req.Header.Set(api.DefaultUserHeader, "carol")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("request from %s: %v", ip, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "trusted") {
		t.Errorf("forged X-Grafana-User from %s: %d %s, want 403", ip, resp.StatusCode, body)
	}
	t.Logf("forged header from %s: %d %s", ip, resp.StatusCode, strings.TrimSpace(string(body)))
}

// checkAcct runs `wattrace acct` as alice (runuser) with her token.
func checkAcct(t *testing.T, a *apiServer, e *exporter, token string, jobs map[string]*e2eJob) {
	t.Helper()
	// A copy alice can execute (the build directory is root's).
	dir, err := os.MkdirTemp("", "wattrace-e2e-acct-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "wattrace")
	if out, err := exec.Command("install", "-m", "0755", exporterBinary(t), bin).CombinedOutput(); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	acct := func(args ...string) string {
		cmd := exec.Command("runuser", append([]string{"-u", "alice", "--", bin, "acct", "--url", a.url(), "--starttime=now-1h"}, args...)...)
		cmd.Env = append(os.Environ(), "WATTRACE_API_TOKEN="+token)
		cmd.Dir = "/tmp"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("wattrace acct %v as alice: %v\n%s", args, err, out)
		}
		return string(out)
	}
	table := acct()
	t.Logf("wattrace acct as alice:\n%s", table)
	for _, k := range []string{"multistep", "cancelled"} {
		if !strings.Contains(table, "\n"+jobs[k].id+" ") {
			t.Errorf("acct table lacks alice's job %s", jobs[k].id)
		}
	}
	for _, k := range []string{"short", "running"} {
		if strings.Contains(table, "\n"+jobs[k].id+" ") {
			t.Errorf("acct table shows bob's job %s to alice", jobs[k].id)
		}
	}
	var us []units.Unit
	if err := json.Unmarshal([]byte(acct("--json")), &us); err != nil {
		t.Fatalf("acct --json does not parse: %v", err)
	}
	if len(us) != 2 {
		t.Errorf("acct --json: %d units, want alice's 2", len(us))
	}
	for _, u := range us {
		if u.User != "alice" || u.Figures.CPUSeconds <= 0 {
			t.Errorf("acct --json: unit %s of %s, CPU %v", u.ID, u.User, u.Figures.CPUSeconds)
		}
	}
	cmd := exec.Command("runuser", "-u", "alice", "--", bin, "acct", "--url", a.url(), "--user=bob")
	cmd.Env = append(os.Environ(), "WATTRACE_API_TOKEN="+token)
	cmd.Dir = "/tmp"
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "403") {
		t.Errorf("acct --user=bob as alice: %v %s, want the server's 403", err, out)
	}
}

// waitPending polls s until unit id is pending (its TSDB down), with the
// energy it had (not zero).
func waitPending(t *testing.T, s *apiServer, begin time.Time, limit time.Duration, id string) bool {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if us, err := s.units("carol", begin); err == nil {
			if u, ok := us[id]; ok && u.Status == units.StatusPending {
				t.Logf("%s: job %s pending while the TSDB is down (%.3f J kept)", s.name, u.ID, u.Totals.Joules)
				if u.Totals.Joules <= 0 {
					t.Errorf("%s: pending job %s has no energy", s.name, id)
				}
				return true
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return false
}

// waitRunning waits until s counts unit id as running with some energy.
func waitRunning(t *testing.T, s *apiServer, begin time.Time, limit time.Duration, id string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if us, err := s.units("carol", begin); err == nil {
			if u, ok := us[id]; ok && u.Status == units.StatusRunning && u.Totals.Joules > 0 {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("%s: job %s not counted as running within %s", s.name, id, limit)
}

// watcher polls a server's units and remembers the most each one had.
type watcher struct {
	t      *testing.T
	s      *apiServer
	begin  time.Time
	mu     sync.Mutex
	max    map[string]float64
	bad    []string
	polls  int
	done   chan struct{}
	exited chan struct{}
	once   sync.Once
}

func newWatcher(t *testing.T, s *apiServer, begin time.Time) *watcher {
	w := &watcher{t: t, s: s, begin: begin, max: map[string]float64{}, done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(w.exited)
		for {
			select {
			case <-w.done:
				return
			case <-time.After(700 * time.Millisecond):
			}
			us, err := s.units("carol", begin)
			if err != nil {
				continue
			}
			w.mu.Lock()
			w.polls++
			for id, u := range us {
				if m := w.max[id]; u.Totals.Joules < m*(1-1e-9) {
					w.bad = append(w.bad, fmt.Sprintf("job %s: %.3f J after %.3f J (status %s)", id, u.Totals.Joules, m, u.Status))
				}
				w.max[id] = math.Max(w.max[id], u.Totals.Joules)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *watcher) stop() {
	w.once.Do(func() { close(w.done); <-w.exited })
}

func (w *watcher) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Logf("%s: %d polls of the units while the TSDB went away and back", w.s.name, w.polls)
	for _, b := range w.bad {
		w.t.Errorf("%s: a unit's energy went down: %s", w.s.name, b)
	}
}

// checkAcctMunge: on D, which accepts MUNGE credentials made for its URL
// and trusts no address, alice's `wattrace acct` (runuser, no token, no
// setgid bit, a world-readable client file without secrets) authenticates
// with the real munged and shows her jobs only. Credentials bob makes with
// the real munge command are refused when replayed, expired, restricted
// to another uid, made for a server of his own, or when he names alice;
// one whose payload claims alice is still bob's. Bob, with every file and
// environment variable of the install, cannot act as alice, and alice's
// acct run in an environment bob chose (GODEBUG=http2debug=2,
// HTTPS_PROXY to his listener, SSL_KEYLOGFILE, --url to his TLS server)
// gives him only a credential D refuses.
func checkAcctMunge(t *testing.T, d *apiServer, jobs map[string]*e2eJob, socket string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "wattrace-e2e-munge-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	m := newMungeBed(t, d, jobs, socket, dir)
	m.aliceOverMunge()
	m.bobsCredentials()
	m.bobWithTheInstall()
	m.aliceInBobsEnvironment()
	m.noCredential()
}

// mungePath is what the credentials made by hand are for.
const mungePath = "/api/v1/units?kind=job"

// mungeBed is what checkAcctMunge's steps share.
type mungeBed struct {
	t      *testing.T
	d      *apiServer
	jobs   map[string]*e2eJob
	socket string // munged's socket; "" for munge's default
	dir    string // the checks' directory, readable by all
	bin    string // a copy of wattrace the users can execute
	cfg    string // the client file naming D, readable by all
	n      int    // payloads made, so that no two nonces are alike
}

// newMungeBed installs a copy of wattrace that alice and bob can execute
// (the build directory is root's) and a client file naming D into dir.
func newMungeBed(t *testing.T, d *apiServer, jobs map[string]*e2eJob, socket, dir string) *mungeBed {
	t.Helper()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "wattrace")
	if out, err := exec.Command("install", "-m", "0755", exporterBinary(t), bin).CombinedOutput(); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	cfg := filepath.Join(dir, "acct.yaml")
	if err := os.WriteFile(cfg, []byte("url: "+d.url()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &mungeBed{t: t, d: d, jobs: jobs, socket: socket, dir: dir, bin: bin, cfg: cfg}
}

// acct is acct's arguments, with munged's socket when it is not munge's
// default: --munge-socket here, munge_socket in the client file bob
// hands alice.
func (m *mungeBed) acct(args ...string) []string {
	if m.socket != "" {
		args = append([]string{"--munge-socket=" + m.socket}, args...)
	}
	return append([]string{"acct"}, args...)
}

// runAs runs name as user (runuser) in /tmp with stdin, and env added to
// the test's environment; it returns stdout and stderr.
func runAs(user, stdin string, env []string, name string, args ...string) (string, string, error) {
	cmd := exec.Command("runuser", append([]string{"-u", user, "--", name}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = "/tmp"
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// mine fails unless acct's table out shows who's jobs and no other's.
func (m *mungeBed) mine(out string, who string) {
	t := m.t
	t.Helper()
	own, other := []string{"multistep", "cancelled"}, []string{"short", "running"}
	if who == "bob" {
		own, other = other, own
	}
	for _, k := range own {
		if !strings.Contains(out, "\n"+m.jobs[k].id+" ") {
			t.Errorf("%s's acct lacks their job %s:\n%s", who, m.jobs[k].id, out)
		}
	}
	for _, k := range other {
		if strings.Contains(out, "\n"+m.jobs[k].id+" ") {
			t.Errorf("%s's acct shows job %s of another user:\n%s", who, m.jobs[k].id, out)
		}
	}
}

// aliceOverMunge: alice's acct authenticates with munged and shows her
// jobs only, as a table and as JSON, and asking for bob's gets the
// server's 403.
func (m *mungeBed) aliceOverMunge() {
	t := m.t
	t.Helper()
	out, errOut, err := runAs("alice", "", nil, m.bin, m.acct("--config", m.cfg, "--starttime=now-1h", "--format=jobid,user,project,state,energy")...)
	if err != nil {
		t.Fatalf("wattrace acct (MUNGE) as alice: %v\n%s%s", err, out, errOut)
	}
	t.Logf("wattrace acct (MUNGE) as alice:\n%s", out)
	m.mine(out, "alice")
	js, errOut, err := runAs("alice", "", nil, m.bin, m.acct("--config", m.cfg, "--starttime=now-1h", "--json")...)
	var us []units.Unit
	if err != nil || json.Unmarshal([]byte(js), &us) != nil || len(us) != 2 {
		t.Errorf("acct --json (MUNGE) as alice: %v %d units %s", err, len(us), errOut)
	}
	if out, errOut, err := runAs("alice", "", nil, m.bin, m.acct("--config", m.cfg, "--user=bob")...); err == nil || !strings.Contains(errOut, "403") {
		t.Errorf("acct --user=bob as alice over MUNGE: %v %s%s, want the server's 403", err, out, errOut)
	}
}

// payload is a credential's payload for GET mungePath at aud, with a fresh
// nonce and extra's fields.
func (m *mungeBed) payload(aud string, extra map[string]any) string {
	m.n++
	p := map[string]any{"v": 1, "aud": aud, "method": "GET", "path": mungePath, "nonce": fmt.Sprintf("e2e-%d-%d", time.Now().UnixNano(), m.n)}
	for k, v := range extra {
		p[k] = v
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// mungeAs makes a credential of payload as user with the real munge.
func (m *mungeBed) mungeAs(user, payload string, args ...string) string {
	t := m.t
	t.Helper()
	if m.socket != "" {
		args = append([]string{"--socket=" + m.socket}, args...)
	}
	out, errOut, err := runAs(user, payload, nil, "munge", args...)
	if err != nil {
		t.Fatalf("munge %v as %s: %v %s", args, user, err, errOut)
	}
	return strings.TrimSpace(out)
}

// ask sends GET mungePath to D with cred and, when set, the user header;
// it returns the status, the error message and the owners of the units
// answered.
func (m *mungeBed) ask(cred, header string) (int, string, []string) {
	req, _ := http.NewRequest(http.MethodGet, m.d.url()+mungePath, nil)
	req.Header.Set("Authorization", "MUNGE "+cred)
	if header != "" {
		req.Header.Set(api.DefaultUserHeader, header)
	}
	code, data, msg := do(req)
	var got []units.Unit
	_ = json.Unmarshal(data, &got)
	var owners []string
	for _, u := range got {
		owners = append(owners, u.User)
	}
	return code, msg, owners
}

// refused fails unless code is 401 or 403, and logs the refusal.
func (m *mungeBed) refused(what string, code int, msg string) {
	t := m.t
	t.Helper()
	if code != 401 && code != 403 {
		t.Errorf("%s: %d %s, want 401 or 403", what, code, msg)
	} else {
		t.Logf("%s: %d %s", what, code, msg)
	}
}

// bobsCredentials: credentials bob makes with the real munge, sent by
// hand. His own is good once; replayed, expired, restricted to alice's
// uid, made for a server of his own or naming alice in the header it is
// refused; one whose payload claims alice gets bob's jobs only.
func (m *mungeBed) bobsCredentials() {
	t := m.t
	t.Helper()
	dAud, _ := access.Audience(m.d.url())
	bobs := m.mungeAs("bob", m.payload(dAud, nil), "-t", "60")
	if code, msg, owners := m.ask(bobs, ""); code != 200 || len(owners) == 0 || slices.ContainsFunc(owners, func(u string) bool { return u != "bob" }) {
		t.Errorf("bob's own credential: %d %s, owners %v, want bob's jobs", code, msg, owners)
	}
	code, msg, _ := m.ask(bobs, "")
	m.refused("bob's credential replayed", code, msg)
	expired := m.mungeAs("bob", m.payload(dAud, nil), "-t", "1")
	time.Sleep(2500 * time.Millisecond)
	code, msg, _ = m.ask(expired, "")
	m.refused("bob's expired credential (-t 1)", code, msg)
	code, msg, _ = m.ask(m.mungeAs("bob", m.payload(dAud, nil), "-t", "60", "-u", "alice"), "")
	m.refused("bob's credential restricted to alice's uid", code, msg)
	code, msg, _ = m.ask(m.mungeAs("bob", m.payload(fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), nil), "-t", "60"), "")
	m.refused("bob's credential made for a server of his own", code, msg)
	aliceUser, err := user.Lookup("alice")
	if err != nil {
		t.Fatal(err)
	}
	claim := map[string]any{"user": "alice", "uid": aliceUser.Uid}
	if code, msg, owners := m.ask(m.mungeAs("bob", m.payload(dAud, claim), "-t", "60"), ""); code != 200 || slices.Contains(owners, "alice") {
		t.Errorf("bob's credential whose payload claims alice: %d %s, owners %v, want bob's jobs only", code, msg, owners)
	}
	code, msg, _ = m.ask(m.mungeAs("bob", m.payload(dAud, claim), "-t", "60"), "alice")
	m.refused("bob's credential naming alice in the user header", code, msg)
}

// bobWithTheInstall: bob with the install's files and environment: his
// acct asks as bob.
func (m *mungeBed) bobWithTheInstall() {
	t := m.t
	t.Helper()
	env := []string{"WATTRACE_API_URL=" + m.d.url()}
	if out, errOut, err := runAs("bob", "", env, m.bin, m.acct("--config", m.cfg, "--user=alice")...); err == nil || !strings.Contains(errOut, "403") {
		t.Errorf("bob's acct --user=alice: %v %s%s, want 403", err, out, errOut)
	}
	out, errOut, err := runAs("bob", "", env, m.bin, m.acct("--config", m.cfg, "--starttime=now-1h")...)
	if err != nil {
		t.Fatalf("bob's acct: %v %s", err, errOut)
	}
	m.mine(out, "bob")
}

// bobsServer is bob's TLS server (HTTP/2) and his proxy, and what alice's
// acct sent them.
type bobsServer struct {
	evil    *httptest.Server
	proxy   net.Listener
	mu      sync.Mutex
	caught  []*http.Request
	proxied strings.Builder
}

// startBobsServer starts bob's server, which answers an empty list, and
// his proxy, which reads what it is sent for 2 s and answers nothing.
func startBobsServer(t *testing.T) *bobsServer {
	t.Helper()
	b := &bobsServer{}
	b.evil = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.caught = append(b.caught, r.Clone(context.Background()))
		b.mu.Unlock()
		_, _ = io.WriteString(w, `{"status":"success","data":[]}`)
	}))
	b.evil.EnableHTTP2 = true
	b.evil.StartTLS()
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.evil.Close()
		t.Fatal(err)
	}
	b.proxy = proxy
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			data, _ := io.ReadAll(io.LimitReader(c, 1<<16))
			b.mu.Lock()
			b.proxied.Write(data)
			b.mu.Unlock()
			c.Close()
		}
	}()
	return b
}

func (b *bobsServer) close() {
	b.proxy.Close()
	b.evil.Close()
}

// bobsClientFile writes the client file bob hands alice: his server's URL
// and CA (and munged's socket when not the default).
func (m *mungeBed) bobsClientFile(evil *httptest.Server) string {
	t := m.t
	t.Helper()
	ca := filepath.Join(m.dir, "evil-ca.pem")
	evilCfg := filepath.Join(m.dir, "evil.yaml")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: evil.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	evilYAML := "url: " + evil.URL + "\nca_file: " + ca + "\n"
	if m.socket != "" {
		evilYAML += "munge_socket: " + m.socket + "\n"
	}
	if err := os.WriteFile(evilCfg, []byte(evilYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return evilCfg
}

// aliceInBobsEnvironment: alice's acct in an environment bob chose, sent
// to bob's server: his server sees one request, his key log and proxy
// nothing, and the one credential he catches D refuses.
func (m *mungeBed) aliceInBobsEnvironment() {
	t := m.t
	t.Helper()
	b := startBobsServer(t)
	defer b.close()
	evilCfg := m.bobsClientFile(b.evil)
	keyDir := filepath.Join(m.dir, "keys")
	if err := os.Mkdir(keyDir, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(keyDir, 0o777)
	hostile := []string{"GODEBUG=http2debug=2", "HTTPS_PROXY=http://" + b.proxy.Addr().String(), "HTTP_PROXY=http://" + b.proxy.Addr().String(),
		"SSL_KEYLOGFILE=" + filepath.Join(keyDir, "keys.log"), "WATTRACE_API_URL=" + b.evil.URL}
	out, errOut, err := runAs("alice", "", hostile, m.bin, "acct", "--config", evilCfg, "--url", b.evil.URL, "--starttime=now-1h")
	if err != nil {
		t.Fatalf("alice's acct in bob's environment: %v %s%s", err, out, errOut)
	}
	if !strings.Contains(errOut, "http2:") {
		t.Errorf("GODEBUG=http2debug=2 printed nothing: %s", errOut)
	}
	keys, _ := os.ReadFile(filepath.Join(keyDir, "keys.log"))
	b.mu.Lock()
	loot := out + errOut + string(keys) + b.proxied.String()
	reqs := b.caught
	for _, r := range b.caught {
		loot += "\n" + r.Header.Get("Authorization")
	}
	b.mu.Unlock()
	if len(reqs) != 1 || len(keys) != 0 || b.proxied.Len() != 0 {
		t.Errorf("bob's server saw %d requests (want 1), the key log holds %d bytes, the proxy %d (want none)", len(reqs), len(keys), b.proxied.Len())
	}
	// The debug dump and the request carry the same credential.
	creds := slices.Compact(slices.Sorted(slices.Values(regexp.MustCompile(`MUNGE:[A-Za-z0-9+/=]+:`).FindAllString(loot, -1))))
	if len(creds) != 1 {
		t.Errorf("bob caught %d distinct credentials, want the one acct sent", len(creds))
	}
	if len(creds) == 0 {
		t.Fatalf("no MUNGE credential in what bob caught:\n%s", loot)
	}
	m.replayCaught(creds, reqs)
}

// replayCaught sends D each request bob caught with each credential he
// caught, as is and naming alice: refused.
func (m *mungeBed) replayCaught(creds []string, reqs []*http.Request) {
	m.t.Helper()
	for i, cred := range creds {
		for _, r := range reqs {
			req, _ := http.NewRequest(http.MethodGet, m.d.url()+r.URL.RequestURI(), nil)
			req.Header.Set("Authorization", "MUNGE "+cred)
			code, _, msg := do(req)
			m.refused(fmt.Sprintf("alice's credential %d caught by bob, replayed to D", i), code, msg)
			req.Header.Set(api.DefaultUserHeader, "alice")
			code, _, msg = do(req)
			m.refused(fmt.Sprintf("alice's credential %d caught by bob, replayed to D naming alice", i), code, msg)
		}
	}
}

// noCredential: without a credential D believes no header, from any
// address.
func (m *mungeBed) noCredential() {
	t := m.t
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, m.d.url()+mungePath, nil)
	req.Header.Set(api.DefaultUserHeader, "carol")
	if code, _, _ := do(req); code != http.StatusForbidden {
		t.Errorf("a header without credentials to D: %d, want 403", code)
	}
	req.Header.Del(api.DefaultUserHeader)
	if code, _, _ := do(req); code != http.StatusUnauthorized {
		t.Errorf("no credential to D: %d, want 401", code)
	}
}

// exporterWatch scrapes the exporter every second and keeps each job's
// latest energy over the zones that count each joule once: after a job
// ends its counters stay at their final values for the retention.
type exporterWatch struct {
	mu   sync.Mutex
	last map[string]float64
}

func watchExporter(t *testing.T, e *exporter) *exporterWatch {
	w := &exporterWatch{last: map[string]float64{}}
	done := make(chan struct{})
	exited := make(chan struct{})
	t.Cleanup(func() { close(done); <-exited })
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
			fams, err := e.scrape()
			if err != nil {
				continue
			}
			byJob := map[string]map[string]float64{}
			for _, m := range match(fams, "wattrace_job_energy_joules_total", nil) {
				id := label(m, "job_id")
				if byJob[id] == nil {
					byJob[id] = map[string]float64{}
				}
				byJob[id][label(m, "zone")] += value(m)
			}
			w.mu.Lock()
			for id, zones := range byJob {
				var names []string
				for z := range zones {
					names = append(names, z)
				}
				var total float64
				for _, z := range units.TotalZones(names) {
					total += zones[z]
				}
				w.last[id] = total
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *exporterWatch) joules(id string) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[id]
}
