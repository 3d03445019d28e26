// Package grafana holds wattrace's Grafana dashboards (dashboards/*.json,
// provisioned by provisioning/dashboards/wattrace.yaml) and reads their
// queries, for the lint test here and the end-to-end test that runs every
// query against a real Prometheus.
package grafana

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
)

// FS holds the dashboard JSON files.
//
//go:embed dashboards/*.json
var FS embed.FS

// Dashboard is the part of Grafana's dashboard model the checks read.
type Dashboard struct {
	File        string `json:"-"`
	UID         string `json:"uid"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Templating  struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Variable is a template variable.
type Variable struct {
	Name     string          `json:"name"`
	Type     string          `json:"type"`
	Query    json.RawMessage `json:"query"`
	AllValue string          `json:"allValue"`
}

// Panel is a panel or a row (whose collapsed panels sit in Panels).
type Panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  *Datasource `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []Target `json:"targets"`
	Panels  []Panel  `json:"panels"`
}

// Datasource references a data source by type and uid.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *Datasource `json:"datasource"`
}

// Query is one panel query with where it comes from.
type Query struct {
	Dashboard, Panel, RefID, Expr string
}

func (q Query) String() string { return fmt.Sprintf("%s / %s / %s", q.Dashboard, q.Panel, q.RefID) }

// Load reads every dashboard in FS, sorted by file name.
func Load() ([]*Dashboard, error) {
	names, err := fs.Glob(FS, "dashboards/*.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*Dashboard
	for _, n := range names {
		b, err := FS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		d := &Dashboard{File: path.Base(n)}
		if err := json.Unmarshal(b, d); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// AllPanels returns the panels, rows' collapsed panels included, rows left
// out.
func (d *Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// Queries returns every panel query of the dashboard.
func (d *Dashboard) Queries() []Query {
	var out []Query
	for _, p := range d.AllPanels() {
		for _, t := range p.Targets {
			out = append(out, Query{Dashboard: d.Title, Panel: p.Title, RefID: t.RefID, Expr: t.Expr})
		}
	}
	return out
}

var varRef = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// Substitute replaces Grafana's variables in expr: the built-in
// $__rate_interval and $__range by the given ranges, every other variable
// by its value in vars (a missing one is left as is, for the caller to
// notice).
func Substitute(expr, rateInterval, rng string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(expr, func(m string) string {
		name := strings.Trim(m, "${}")
		switch name {
		case "__rate_interval":
			return rateInterval
		case "__range":
			return rng
		}
		if v, ok := vars[name]; ok {
			return v
		}
		return m
	})
}
