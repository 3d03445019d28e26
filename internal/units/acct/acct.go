// Package acct is `wattrace acct`: the units API's jobs of the calling user
// as a table, like sacct or CEEMS's cacct, with energy (kWh), CO2e (g),
// CPU, GPU and wall time.
//
// Who asks is what the request's credential proves, never a name the
// command sends: by default a MUNGE credential that the local munged makes
// for the calling uid, fresh for each request and bound to the server's
// URL, the method and the path (access.MungePayload); else a personal
// bearer token (--token or WATTRACE_API_TOKEN) or the user's own client
// certificate (--cert, --key). The command holds no shared secret and is
// installed with no setuid or setgid bit, so nothing in its environment,
// its files or its traffic lets one user act as another. Which units the
// user may see is the server's decision: --user for anyone else is refused
// there unless the user is an admin.
package acct

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wattrace/wattrace/internal/units/access"
	"github.com/wattrace/wattrace/pkg/units"
)

// DefaultConfigFile is the site's client file: the server's URL and CA,
// no secret (mode 0644). A missing default file is no error.
const DefaultConfigFile = "/etc/wattrace/acct.yaml"

// Config is the client configuration file. It holds no credential: the
// command runs with the user's own rights only, so a shared secret in a
// file the user can read would be the user's too.
type Config struct {
	// URL of the API server (https://host:9842).
	URL string `yaml:"url"`
	// Auth is munge, token or cert (default: token when given, cert when
	// given, else munge when the munge command is found).
	Auth string `yaml:"auth"`
	// Munge is the munge command.
	Munge string `yaml:"munge"`
	// MungeSocket is munged's socket, passed to munge (its default
	// when empty).
	MungeSocket string `yaml:"munge_socket"`
	// TTL of each MUNGE credential.
	MungeTTL time.Duration `yaml:"munge_ttl"`
	// TLS: the server's CA, and the user's own client certificate.
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	// Timeout of one request.
	Timeout time.Duration `yaml:"timeout"`
	// Username and Password were a setgid install's shared basic-auth
	// credentials; they are refused so that an old file fails loudly.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
}

// Env is what the command reads of its process, passed in for tests.
type Env struct {
	// User is the calling (real) Unix user's name.
	User string
	// Getenv reads the environment.
	Getenv func(string) string
	// Now is the clock.
	Now func() time.Time
	// Location is the time zone of the table (time.Local).
	Location *time.Location
}

// Run runs `wattrace acct ARGS` and returns the exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) int {
	if err := run(ctx, args, stdout, stderr, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "wattrace acct:", err)
		var ue *usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

type options struct {
	config, url, token    string
	auth, cert, key       string
	munge, mungeSocket    string
	start, end            string
	jobs, projects, users string
	format                string
	json, csv             bool
	cluster               string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Location == nil {
		env.Location = time.Local
	}
	var o options
	fs := flag.NewFlagSet("wattrace acct", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.config, "config", DefaultConfigFile, "client configuration: server URL, CA, auth (no secrets)")
	fs.StringVar(&o.url, "url", env.Getenv("WATTRACE_API_URL"), "API server URL (env WATTRACE_API_URL)")
	fs.StringVar(&o.auth, "auth", "", "credential: munge, token or cert (default: token or cert when given, else munge)")
	fs.StringVar(&o.token, "token", "", "personal API token (env WATTRACE_API_TOKEN)")
	fs.StringVar(&o.cert, "cert", "", "your client certificate (PEM), with --key")
	fs.StringVar(&o.key, "key", "", "your client certificate's key (PEM)")
	fs.StringVar(&o.munge, "munge", "", "the munge command (default munge, or munge in the configuration)")
	fs.StringVar(&o.mungeSocket, "munge-socket", "", "munged's socket, passed to munge as --socket (default munge's own, or munge_socket in the configuration)")
	fs.StringVar(&o.start, "starttime", "", "units that ran after this time (YYYY-MM-DD[THH:MM[:SS]], RFC 3339, Unix seconds, now-7d); default 00:00 today")
	fs.StringVar(&o.start, "S", "", "short for --starttime")
	fs.StringVar(&o.end, "endtime", "", "units that ran before this time; default now")
	fs.StringVar(&o.end, "E", "", "short for --endtime")
	fs.StringVar(&o.jobs, "job", "", "comma-separated job ids")
	fs.StringVar(&o.jobs, "j", "", "short for --job")
	fs.StringVar(&o.projects, "project", "", "comma-separated projects (Slurm accounts)")
	fs.StringVar(&o.projects, "A", "", "short for --project")
	fs.StringVar(&o.users, "user", "", "comma-separated users (admins only; the server refuses others)")
	fs.StringVar(&o.users, "u", "", "short for --user")
	fs.StringVar(&o.cluster, "cluster", "", "cluster name")
	fs.StringVar(&o.format, "format", strings.Join(defaultColumns, ","), "comma-separated columns: "+strings.Join(columnNames(), ","))
	fs.StringVar(&o.format, "o", strings.Join(defaultColumns, ","), "short for --format")
	fs.BoolVar(&o.json, "json", false, "print the units as JSON (every field)")
	fs.BoolVar(&o.csv, "csv", false, "print the columns as CSV")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err}
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if o.json && o.csv {
		return &usageError{errors.New("--json and --csv exclude each other")}
	}
	cols, err := parseColumns(o.format)
	if err != nil {
		return &usageError{err}
	}
	if o.token == "" {
		o.token = env.Getenv("WATTRACE_API_TOKEN")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if env.User == "" {
		return errors.New("cannot tell the calling user")
	}
	client, base, err := o.client(env, set)
	if err != nil {
		return err
	}
	q, err := o.query(env)
	if err != nil {
		return &usageError{err}
	}
	us, err := client.units(ctx, base, q, o.users != "")
	if err != nil {
		return err
	}
	// Oldest first, as sacct lists jobs (the API answers newest first).
	sort.SliceStable(us, func(i, j int) bool {
		if !us[i].Start.Equal(us[j].Start) {
			return us[i].Start.Before(us[j].Start)
		}
		return us[i].ID < us[j].ID
	})
	switch {
	case o.json:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if us == nil {
			us = []units.Unit{}
		}
		return enc.Encode(us)
	case o.csv:
		w := csv.NewWriter(stdout)
		_ = w.Write(headers(cols))
		for _, u := range us {
			_ = w.Write(cells(u, cols, env))
		}
		w.Flush()
		return w.Error()
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(headers(cols), "\t"))
	for _, u := range us {
		fmt.Fprintln(tw, strings.Join(cells(u, cols, env), "\t"))
	}
	return tw.Flush()
}

// client builds the HTTP client from the configuration file and flags,
// and picks the credential.
func (o *options) client(env Env, set map[string]bool) (*client, *url.URL, error) {
	cfg, err := o.readConfig(set)
	if err != nil {
		return nil, nil, err
	}
	raw := cfg.URL
	if o.url != "" {
		raw = o.url
	}
	if raw == "" {
		return nil, nil, errors.New("no server URL: url in the configuration, --url or WATTRACE_API_URL")
	}
	base, err := url.Parse(raw)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, nil, fmt.Errorf("invalid server URL %q: http(s)://host:port", raw)
	}
	c := &client{user: env.User, token: o.token, mungeTTL: cfg.MungeTTL}
	if c.mungeTTL <= 0 {
		c.mungeTTL = time.Minute
	}
	c.munge = firstOf(o.munge, cfg.Munge, "munge")
	c.mungeSocket = firstOf(o.mungeSocket, cfg.MungeSocket)
	certFile, keyFile := firstOf(o.cert, cfg.CertFile), firstOf(o.key, cfg.KeyFile)
	if err := c.pickAuth(firstOf(o.auth, cfg.Auth), certFile, keyFile); err != nil {
		return nil, nil, err
	}
	if c.auth == "munge" {
		if c.audience, err = access.Audience(base.String()); err != nil {
			return nil, nil, err
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The server named by --url or the configuration is the only place a
	// request goes: no proxy from the environment sees it.
	tr.Proxy = nil
	if tr.TLSClientConfig, err = tlsConfig(cfg, c.auth == "cert", certFile, keyFile); err != nil {
		return nil, nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	c.http = &http.Client{Transport: tr, Timeout: timeout,
		// A redirect would carry a credential made for another path.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return c, base, nil
}

// readConfig reads the client configuration file; a missing one is an
// empty configuration unless --config named it.
func (o *options) readConfig(set map[string]bool) (Config, error) {
	var cfg Config
	b, err := os.ReadFile(o.config)
	switch {
	case err == nil:
		if err := yaml.Unmarshal(b, &cfg); err != nil {
			return Config{}, fmt.Errorf("%s: %w", o.config, err)
		}
		if cfg.Username != "" || cfg.Password != "" {
			return Config{}, fmt.Errorf("%s: username and password are no longer read: wattrace acct holds no shared secret; "+
				"remove them and authenticate with MUNGE, a token or your own certificate (docs/units.md)", o.config)
		}
	case errors.Is(err, os.ErrNotExist) && !set["config"]:
	default:
		return Config{}, fmt.Errorf("reading the client configuration: %w", err)
	}
	return cfg, nil
}

// pickAuth sets c.auth: auth when given, else a token when there is one,
// the certificate when there is one, else MUNGE; and checks that the
// credential it needs is there.
func (c *client) pickAuth(auth, certFile, keyFile string) error {
	c.auth = auth
	if c.auth == "" {
		switch {
		case c.token != "":
			c.auth = "token"
		case certFile != "":
			c.auth = "cert"
		default:
			if _, err := exec.LookPath(c.munge); err != nil {
				return fmt.Errorf("no credential: %s not found (MUNGE); give --token or --cert", c.munge)
			}
			c.auth = "munge"
		}
	}
	switch c.auth {
	case "token":
		if c.token == "" {
			return errors.New("--auth token: give --token or WATTRACE_API_TOKEN")
		}
	case "cert":
		if certFile == "" || keyFile == "" {
			return errors.New("--auth cert: give --cert and --key")
		}
	case "munge":
		if _, err := exec.LookPath(c.munge); err != nil {
			return fmt.Errorf("--auth munge: %w", err)
		}
	default:
		return &usageError{fmt.Errorf("--auth %q: munge, token or cert", c.auth)}
	}
	return nil
}

// tlsConfig is the client's TLS: the configuration's CA file, and the
// user's certificate when it is the credential.
func tlsConfig(cfg Config, withCert bool, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify} // #nosec G402 -- opt-in for test servers
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no certificate", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if withCert {
		// Read with the user's own rights: the key is the user's.
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// query builds /api/v1/units's query string.
func (o *options) query(env Env) (url.Values, error) {
	now := env.Now().In(env.Location)
	y, m, d := now.Date()
	start := time.Date(y, m, d, 0, 0, 0, 0, env.Location)
	var err error
	if o.start != "" {
		if start, err = parseTime(o.start, now, env.Location); err != nil {
			return nil, fmt.Errorf("--starttime: %w", err)
		}
	}
	end := now
	if o.end != "" {
		if end, err = parseTime(o.end, now, env.Location); err != nil {
			return nil, fmt.Errorf("--endtime: %w", err)
		}
	}
	if !start.Before(end) {
		return nil, fmt.Errorf("--starttime %s is not before --endtime %s", start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	q := url.Values{}
	// Batch jobs of either manager: a site runs Slurm or PBS (or both,
	// each job's id its manager's).
	q.Set("kind", string(units.KindJob)+","+string(units.KindPBSJob))
	q.Set("from", start.UTC().Format(time.RFC3339))
	q.Set("to", end.UTC().Format(time.RFC3339))
	users := o.users
	if users == "" {
		// The calling user's units, also for an admin (whom the server
		// would otherwise answer with everyone's).
		users = env.User
	}
	for k, v := range map[string]string{"id": o.jobs, "project": o.projects, "user": users, "cluster": o.cluster} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q, nil
}

// parseTime reads sacct's time forms: YYYY-MM-DD[THH:MM[:SS]] in local
// time, RFC 3339, Unix seconds, now and now-N{s,m,h,d,days,weeks}.
func parseTime(s string, now time.Time, loc *time.Location) (time.Time, error) {
	if s == "now" {
		return now, nil
	}
	if rest, ok := strings.CutPrefix(s, "now-"); ok {
		i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		if i <= 0 {
			return time.Time{}, fmt.Errorf("%q: now-N followed by s, m, h, d or w", s)
		}
		n, _ := strconv.Atoi(rest[:i])
		unit := map[string]time.Duration{
			"s": time.Second, "seconds": time.Second, "m": time.Minute, "minutes": time.Minute,
			"h": time.Hour, "hours": time.Hour, "d": 24 * time.Hour, "days": 24 * time.Hour,
			"w": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
		}[rest[i:]]
		if unit == 0 || n > 100000 {
			return time.Time{}, fmt.Errorf("%q: now-N followed by s, m, h, d or w", s)
		}
		return now.Add(-time.Duration(n) * unit), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, nil
		}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 && f < 1e11 {
		return time.Unix(int64(f), 0), nil
	}
	return time.Time{}, fmt.Errorf("%q: YYYY-MM-DD[THH:MM[:SS]], RFC 3339, Unix seconds or now[-N{s,m,h,d,w}]", s)
}

type client struct {
	http  *http.Client
	user  string
	auth  string // munge, token or cert
	token string
	munge string // the munge command
	// mungeSocket is munged's socket ("": munge's default).
	mungeSocket string
	mungeTTL    time.Duration
	audience    string // the server, as the MUNGE payload names it
}

// mungeCredential runs munge for one request: a payload binding the
// credential to this server, method and path, a random nonce, a short TTL.
func (c *client) mungeCredential(ctx context.Context, req *http.Request) (string, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	payload, err := json.Marshal(access.MungePayload{V: 1, Audience: c.audience, Method: req.Method,
		Path: req.URL.RequestURI(), Nonce: hex.EncodeToString(nonce)})
	if err != nil {
		return "", err
	}
	args := []string{"-t", strconv.Itoa(int(c.mungeTTL.Seconds()))}
	if c.mungeSocket != "" {
		args = append(args, "--socket="+c.mungeSocket)
	}
	cmd := exec.CommandContext(ctx, c.munge, args...)
	cmd.Stdin = bytes.NewReader(payload)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", c.munge, err, strings.TrimSpace(stderr.String()))
	}
	cred := strings.TrimSpace(string(out))
	if !strings.HasPrefix(cred, "MUNGE:") {
		return "", fmt.Errorf("%s: not a MUNGE credential: %.40q", c.munge, cred)
	}
	return cred, nil
}

// units asks /api/v1/units.
func (c *client) units(ctx context.Context, base *url.URL, q url.Values, others bool) ([]units.Unit, error) {
	u := base.JoinPath("api/v1/units")
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	switch c.auth {
	case "token":
		req.Header.Set("Authorization", "Bearer "+c.token)
	case "munge":
		cred, err := c.mungeCredential(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("making a MUNGE credential: %w", err)
		}
		req.Header.Set("Authorization", "MUNGE "+cred)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking the units API: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the units API's answer: %w", err)
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("units API answered %s, not JSON: %.200s", resp.Status, body)
	}
	if resp.StatusCode != http.StatusOK || env.Status != "success" {
		return nil, fmt.Errorf("units API: %s: %s", resp.Status, env.Error)
	}
	var us []units.Unit
	if err := json.Unmarshal(env.Data, &us); err != nil {
		return nil, fmt.Errorf("units API's units: %w", err)
	}
	for _, x := range us {
		if x.User != c.user && !others {
			// The server scopes the answer; a unit of someone else
			// without --user means it believed another identity.
			return nil, fmt.Errorf("units API returned unit %s of user %q to %q", x.ID, x.User, c.user)
		}
	}
	return us, nil
}

// column is one column of the table.
type column struct {
	name, header string
	cell         func(u units.Unit, env Env) string
}

var columns = []column{
	{"jobid", "JobID", func(u units.Unit, _ Env) string { return u.ID }},
	{"cluster", "Cluster", func(u units.Unit, _ Env) string { return u.Cluster }},
	{"kind", "Kind", func(u units.Unit, _ Env) string { return string(u.Kind) }},
	{"name", "JobName", func(u units.Unit, _ Env) string { return u.Name }},
	{"user", "User", func(u units.Unit, _ Env) string { return u.User }},
	{"project", "Account", func(u units.Unit, _ Env) string { return u.Project }},
	{"partition", "Partition", func(u units.Unit, _ Env) string { return u.Partition }},
	{"nodes", "NodeList", func(u units.Unit, _ Env) string { return strings.Join(u.Nodes, ",") }},
	{"state", "State", func(u units.Unit, _ Env) string { return u.State }},
	{"status", "Figures", func(u units.Unit, _ Env) string { return string(u.Status) }},
	{"start", "Start", func(u units.Unit, env Env) string { return clock(u.Start, env) }},
	{"end", "End", func(u units.Unit, env Env) string {
		if u.End.IsZero() {
			return "Unknown"
		}
		return clock(u.End, env)
	}},
	{"elapsed", "Elapsed", func(u units.Unit, env Env) string { return duration(u.WallSeconds(env.Now())) }},
	{"cputime", "TotalCPU", func(u units.Unit, _ Env) string { return duration(u.Figures.CPUSeconds) }},
	{"gputime", "GPUTime", func(u units.Unit, _ Env) string { return duration(u.Figures.GPUSeconds) }},
	// Of GPUTime, the time GPUs were held with none of the job's processes
	// on them: what a user can give back.
	{"gpuidle", "GPUHeldIdle", func(u units.Unit, _ Env) string { return duration(u.Figures.GPUIdleSeconds) }},
	{"energy", "Energy(kWh)", func(u units.Unit, _ Env) string { return number(u.Figures.Joules()/3.6e6, 4) }},
	{"gpuenergy", "GPUEnergy(kWh)", func(u units.Unit, _ Env) string { return number(u.Figures.GPUJoules()/3.6e6, 4) }},
	{"co2e", "CO2e(g)", func(u units.Unit, _ Env) string { return number(u.Figures.Grams(""), 2) }},
	{"exitcode", "ExitCode", func(u units.Unit, _ Env) string {
		if u.ExitCode == nil {
			return ""
		}
		return strconv.Itoa(*u.ExitCode)
	}},
}

var defaultColumns = []string{"jobid", "name", "project", "state", "start", "elapsed", "cputime", "gputime", "energy", "co2e"}

func columnNames() []string {
	out := make([]string, len(columns))
	for i, c := range columns {
		out[i] = c.name
	}
	return out
}

func parseColumns(format string) ([]column, error) {
	var out []column
	for _, n := range strings.Split(format, ",") {
		n = strings.ToLower(strings.TrimSpace(n))
		found := false
		for _, c := range columns {
			if c.name == n {
				out = append(out, c)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("--format: unknown column %q (one of %s)", n, strings.Join(columnNames(), ","))
		}
	}
	return out, nil
}

func headers(cols []column) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.header
	}
	return out
}

func cells(u units.Unit, cols []column, env Env) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.cell(u, env)
		if out[i] == "" {
			out[i] = "-"
		}
	}
	return out
}

func clock(t time.Time, env Env) string {
	if t.IsZero() {
		return "Unknown"
	}
	return t.In(env.Location).Format("2006-01-02T15:04:05")
}

// duration is sacct's [D-]HH:MM:SS.
func duration(s float64) string {
	if s <= 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return "00:00:00"
	}
	n := int64(math.Round(s))
	d, h, m, sec := n/86400, n/3600%24, n/60%60, n%60
	if d > 0 {
		return fmt.Sprintf("%d-%02d:%02d:%02d", d, h, m, sec)
	}
	return fmt.Sprintf("%02d:%02d:%02d", h, m, sec)
}

// number prints v with prec decimals, or with three significant digits
// when those decimals would show a non-zero value as zero (a short job's
// kWh).
func number(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if v != 0 && math.Abs(v) < 0.5*math.Pow(10, -float64(prec)) {
		return strconv.FormatFloat(v, 'e', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}
