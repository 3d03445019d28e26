package grafana

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wattrace/wattrace/internal/units/api"
	"github.com/wattrace/wattrace/internal/units/unitstest"
)

const infinity = "yesoreyeram-infinity-datasource"

// myJobs is the part of the My jobs dashboard the checks read: Infinity
// targets and data links, which Dashboard does not model.
type myJobs struct {
	UID         string `json:"uid"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Templating  struct {
		List []struct {
			Name, Type string
			Query      json.RawMessage
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID          int         `json:"id"`
		Type        string      `json:"type"`
		Title       string      `json:"title"`
		Description string      `json:"description"`
		Datasource  *Datasource `json:"datasource"`
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
			Overrides []struct {
				Matcher struct {
					ID      string `json:"id"`
					Options string `json:"options"`
				} `json:"matcher"`
				Properties []struct {
					ID    string          `json:"id"`
					Value json.RawMessage `json:"value"`
				} `json:"properties"`
			} `json:"overrides"`
		} `json:"fieldConfig"`
		Targets []infinityTarget `json:"targets"`
	} `json:"panels"`
}

type infinityTarget struct {
	RefID      string      `json:"refId"`
	Datasource *Datasource `json:"datasource"`
	Type       string      `json:"type"`
	Source     string      `json:"source"`
	Parser     string      `json:"parser"`
	URL        string      `json:"url"`
	URLOptions struct {
		Method string `json:"method"`
		Params []struct{ Key, Value string }
	} `json:"url_options"`
	RootSelector string `json:"root_selector"`
	Columns      []struct {
		Selector, Text, Type string
	} `json:"columns"`
}

func loadMyJobs(t *testing.T) *myJobs {
	t.Helper()
	b, err := os.ReadFile("units/wattrace-my-jobs.json")
	if err != nil {
		t.Fatal(err)
	}
	d := &myJobs{}
	if err := json.Unmarshal(b, d); err != nil {
		t.Fatal(err)
	}
	return d
}

var macro = regexp.MustCompile(`\$\{__(from|to):date:seconds\}|\$kind|\$\{kind\}`)

// Every panel reads the units API through the Infinity data source chosen
// by the dashboard's variable, has a title, a description and a unit.
func TestMyJobsStructure(t *testing.T) {
	d := loadMyJobs(t)
	if d.UID != "wattrace-my-jobs" || d.Title != "wattrace / My jobs" || d.Description == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["units"] != "datasource" || vars["kind"] != "custom" {
		t.Errorf("variables %v: want units (datasource) and kind (custom)", vars)
	}
	ids := map[int]bool{}
	var tables int
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("duplicate panel id %d", p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || p.Description == "" || p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("panel %d %q: title, description and unit are required", p.ID, p.Title)
		}
		if p.Datasource == nil || p.Datasource.Type != infinity || p.Datasource.UID != "${units}" {
			t.Errorf("panel %q: datasource %+v, want %s ${units}", p.Title, p.Datasource, infinity)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${units}" || tg.Type != "json" || tg.Source != "url" ||
				tg.Parser != "backend" || tg.RootSelector != "data" || !strings.HasPrefix(tg.URL, "/api/v1/") {
				t.Errorf("panel %q target %s: want a backend-parsed JSON url under /api/v1/ with root data: %+v", p.Title, tg.RefID, tg)
			}
		}
		if p.Type == "table" {
			tables++
		}
	}
	if tables < 2 || len(d.Panels) < 5 {
		t.Errorf("%d panels, %d tables: panels lost?", len(d.Panels), tables)
	}
}

// Every query, its macros substituted as Grafana would, answers 200 from
// the real API for an ordinary user, and every column's selector finds a
// value in every row (a renamed API field fails here, not in front of a
// user).
func TestMyJobsQueriesAgainstAPI(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	a, err := api.New(unitstest.Store(t, unitstest.Fixture(now)), api.Config{
		Access: api.Access{UserHeader: api.DefaultUserHeader, TrustedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := a.Handler()
	from, to := now.Add(-7*24*time.Hour).Unix(), now.Unix()
	sub := func(s string) string {
		return macro.ReplaceAllStringFunc(s, func(m string) string {
			switch {
			case strings.Contains(m, "from"):
				return itoa(from)
			case strings.Contains(m, "to"):
				return itoa(to)
			}
			return "job"
		})
	}
	d := loadMyJobs(t)
	n := 0
	idle := false
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			q := url.Values{}
			for _, kv := range tg.URLOptions.Params {
				q.Add(kv.Key, sub(kv.Value))
			}
			target := sub(tg.URL) + "?" + q.Encode()
			if strings.Contains(target, "$") {
				t.Errorf("panel %q: unsubstituted variable in %s", p.Title, target)
				continue
			}
			r := httptest.NewRequest(http.MethodGet, target, nil)
			r.RemoteAddr = "127.0.0.1:5000"
			r.Header.Set(api.DefaultUserHeader, "alice")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 {
				t.Errorf("panel %q: %s: %d %s", p.Title, target, w.Code, w.Body)
				continue
			}
			var env struct{ Data []map[string]any }
			if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
				t.Fatal(err)
			}
			if len(env.Data) == 0 {
				t.Errorf("panel %q: %s: no rows for alice", p.Title, target)
			}
			// The fixture's job 101 held two GPUs for its hour, one idle
			// for half of it: the column shows its 1800 s.
			for _, c := range tg.Columns {
				if c.Text != "GPU held idle" {
					continue
				}
				idle = true
				for _, row := range env.Data {
					v, _ := selectPath(row, c.Selector)
					if row["id"] == "101" && v != 1800.0 || row["id"] == "102" && v != 0.0 {
						t.Errorf("panel %q: job %v GPU held idle %v, want 1800 for 101, 0 for 102", p.Title, row["id"], v)
					}
				}
			}
			// A column may be empty in some rows (a running unit has no
			// end), not in all.
			for _, c := range tg.Columns {
				hits := 0
				for _, row := range env.Data {
					if _, ok := selectPath(row, c.Selector); ok {
						hits++
					}
				}
				if hits == 0 && len(env.Data) > 0 {
					t.Errorf("panel %q column %q: selector %q finds nothing in %v", p.Title, c.Text, c.Selector, keys(env.Data[0]))
				}
			}
			n++
		}
	}
	if n < 5 {
		t.Errorf("only %d queries checked", n)
	}
	if !idle {
		t.Error("no GPU held idle column")
	}
}

// The job id links to the workloads dashboard's job_id variable, with the
// unit's time range, from columns the table has; a link to one panel
// (viewPanel) names a panel the dashboard has, and the GPU time links to
// the panel of the GPUs the job held idle.
func TestMyJobsLinks(t *testing.T) {
	ds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	idx := dashIndex{vars: map[string]map[string]bool{}, panels: map[string]map[string]Panel{}}
	for _, d := range ds {
		idx.vars[d.UID] = map[string]bool{}
		for _, v := range d.Templating.List {
			idx.vars[d.UID][v.Name] = true
		}
		idx.panels[d.UID] = map[string]Panel{}
		for _, p := range d.AllPanels() {
			idx.panels[d.UID][strconv.Itoa(p.ID)] = p
		}
	}
	gpuIdle := false
	found := 0
	for _, p := range loadMyJobs(t).Panels {
		cols := map[string]bool{}
		for _, tg := range p.Targets {
			for _, c := range tg.Columns {
				cols[c.Text] = true
			}
		}
		for _, o := range p.FieldConfig.Overrides {
			for _, prop := range o.Properties {
				if prop.ID != "links" {
					continue
				}
				var links []struct{ Title, URL string }
				if err := json.Unmarshal(prop.Value, &links); err != nil {
					t.Fatal(err)
				}
				for _, l := range links {
					ok, idle := idx.checkJobLink(t, l.URL, cols, p.Title, o.Matcher.Options)
					if !ok {
						continue
					}
					gpuIdle = gpuIdle || idle
					found++
				}
			}
		}
	}
	if found == 0 {
		t.Error("no link from a job to its time series")
	}
	if !gpuIdle {
		t.Error("no link from a job's GPU time to the GPUs it held idle (a panel on wattrace_gpu_allocation_idle_ratio by job_id)")
	}
}

// The provisioned data source sends the signed-in user in the header the
// API reads, escaped from Grafana's environment expansion.
func TestUnitsDatasourceProvisioning(t *testing.T) {
	b, err := os.ReadFile("provisioning/datasources/wattrace-units.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			UID, Type, URL string
			JSONData       map[string]any    `yaml:"jsonData"`
			Secure         map[string]string `yaml:"secureJsonData"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.APIVersion != 1 || len(f.Datasources) != 1 {
		t.Fatalf("%+v", f)
	}
	ds := f.Datasources[0]
	if ds.Type != infinity || ds.JSONData["httpHeaderName1"] != api.DefaultUserHeader || ds.Secure["httpHeaderValue1"] != "$${__user.login}" {
		t.Errorf("data source %+v: want %s with %s: $${__user.login}", ds, infinity, api.DefaultUserHeader)
	}
	hosts, _ := ds.JSONData["allowedHosts"].([]any)
	if len(hosts) != 1 || hosts[0] != ds.URL {
		t.Errorf("allowedHosts %v, want [%s]", hosts, ds.URL)
	}
}

// selectPath follows a dotted Infinity selector (totals.kwh) into row.
func selectPath(row map[string]any, sel string) (any, bool) {
	var cur any = row
	for _, part := range strings.Split(sel, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// dashIndex holds each dashboard's variables and panels (by id), by uid.
type dashIndex struct {
	vars   map[string]map[string]bool
	panels map[string]map[string]Panel
}

var (
	linkRef  = regexp.MustCompile(`^/d/([a-z0-9-]+)/[a-z0-9-]+\?(.*)$`)
	fieldRef = regexp.MustCompile(`\$\{__data\.fields\.([A-Za-z_]+)\}`)
)

// checkJobLink checks one link of a My jobs panel (title, its columns
// cols) from a field matched by matcher, and reports whether it is a link
// to a dashboard and whether it leads to the GPUs the job held idle.
func (d dashIndex) checkJobLink(t *testing.T, link string, cols map[string]bool, title, matcher string) (ok, gpuIdle bool) {
	t.Helper()
	m := linkRef.FindStringSubmatch(link)
	if m == nil {
		t.Errorf("link %q: not /d/UID/slug?…", link)
		return false, false
	}
	if d.vars[m[1]] == nil {
		t.Errorf("link %q: no dashboard %s", link, m[1])
	}
	q, _ := url.ParseQuery(m[2])
	for k := range q {
		if v, ok := strings.CutPrefix(k, "var-"); ok && !d.vars[m[1]][v] {
			t.Errorf("link %q: dashboard %s has no variable %s", link, m[1], v)
		}
	}
	for _, f := range fieldRef.FindAllStringSubmatch(link, -1) {
		if !cols[f[1]] {
			t.Errorf("link %q: no column %s in panel %q", link, f[1], title)
		}
	}
	if q.Get("var-job_id") == "" || q.Get("from") == "" || q.Get("to") == "" {
		t.Errorf("link %q: want var-job_id, from and to", link)
	}
	if v := q.Get("viewPanel"); v != "" {
		target, has := d.panels[m[1]][v]
		if !has {
			t.Errorf("link %q: dashboard %s has no panel %s", link, m[1], v)
		}
		for _, tg := range target.Targets {
			if (matcher == "GPU time" || matcher == "GPU held idle") && strings.Contains(tg.Expr, "wattrace_gpu_allocation_idle_ratio{") &&
				strings.Contains(tg.Expr, `job_id=~"$job_id"`) {
				gpuIdle = true
			}
		}
	}
	return true, gpuIdle
}
