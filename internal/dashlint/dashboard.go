// Package dashlint lints Grafana dashboards whose queries are PromQL. Its
// rules are those of Grafana's dashboard-linter (github.com/grafana/
// dashboard-linter) that apply to Prometheus dashboards, written anew here
// from that project's rule documentation: the linter itself can't be
// built from this project's module proxy, and two modules it needs are
// AGPL. Findings are excluded or turned into warnings by a `.lint` file in
// the dashboards' directory, in dashboard-linter's format, each exclusion
// with its reason.
//
// Where a rule here differs from dashboard-linter's, its description says
// how (Rules).
package dashlint

import (
	"encoding/json"
	"fmt"
)

// Version is this linter's version.
const Version = "0.1.0"

// Follows is the dashboard-linter release whose rules this one follows.
const Follows = "grafana/dashboard-linter v0.2.0, commit 4d0844b"

// VersionString says which linter this is and whose rules it follows.
func VersionString() string {
	return "dashlint " + Version + " (rules of " + Follows + ")"
}

// Dashboard is the part of Grafana's dashboard model the rules read.
type Dashboard struct {
	Title       string `json:"title"`
	UID         string `json:"uid"`
	Description string `json:"description"`
	Editable    bool   `json:"editable"`
	Templating  struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Parse reads a dashboard's JSON.
func Parse(b []byte) (*Dashboard, error) {
	d := &Dashboard{}
	if err := json.Unmarshal(b, d); err != nil {
		return nil, err
	}
	return d, nil
}

// Variable is a template variable. Query is the query's text, whether the
// JSON holds it as a string or as {"query": …}.
type Variable struct {
	Name       string      `json:"name"`
	Label      string      `json:"label"`
	Type       string      `json:"type"`
	Query      string      `json:"-"`
	Datasource *Datasource `json:"datasource"`
	Multi      bool        `json:"multi"`
	AllValue   string      `json:"allValue"`
	Refresh    int         `json:"refresh"`
}

// UnmarshalJSON reads the query in either of its shapes.
func (v *Variable) UnmarshalJSON(b []byte) error {
	type plain Variable
	var raw struct {
		plain
		Query json.RawMessage `json:"query"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*v = Variable(raw.plain)
	if len(raw.Query) == 0 || string(raw.Query) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw.Query, &v.Query); err == nil {
		return nil
	}
	var q struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw.Query, &q); err != nil {
		return fmt.Errorf("variable %s: query is neither a string nor {\"query\": …}", v.Name)
	}
	v.Query = q.Query
	return nil
}

// Datasource references a data source by uid (or, in old dashboards, by
// name: a plain string, kept as the uid).
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// UnmarshalJSON reads either shape.
func (d *Datasource) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		d.UID = s
		return nil
	}
	type plain Datasource
	return json.Unmarshal(b, (*plain)(d))
}

// Panel is a panel, or a row whose collapsed panels sit in Panels.
type Panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  *Datasource `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit     string          `json:"unit"`
			Mappings json.RawMessage `json:"mappings"`
		} `json:"defaults"`
		Overrides []struct {
			Properties []struct {
				ID    string          `json:"id"`
				Value json.RawMessage `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Options struct {
		ReduceOptions struct {
			Fields string `json:"fields"`
		} `json:"reduceOptions"`
	} `json:"options"`
	Targets []Target `json:"targets"`
	Panels  []Panel  `json:"panels"`
}

// Target is one query of a panel.
type Target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *Datasource `json:"datasource"`
}

// AllPanels returns the panels, those of collapsed rows included, rows
// left out.
func (d *Dashboard) AllPanels() []*Panel {
	var out []*Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for i := range ps {
			if ps[i].Type == "row" {
				walk(ps[i].Panels)
				continue
			}
			out = append(out, &ps[i])
		}
	}
	walk(d.Panels)
	return out
}

// variable returns the template variable called name, nil if none.
func (d *Dashboard) variable(name string) *Variable {
	for i := range d.Templating.List {
		if d.Templating.List[i].Name == name {
			return &d.Templating.List[i]
		}
	}
	return nil
}

// datasourceVariables returns the variables of type datasource.
func (d *Dashboard) datasourceVariables() []*Variable {
	var out []*Variable
	for i := range d.Templating.List {
		if d.Templating.List[i].Type == "datasource" {
			out = append(out, &d.Templating.List[i])
		}
	}
	return out
}

// prometheus reports whether the dashboard's (first) data source variable
// picks Prometheus data sources: the target and job/instance rules apply
// to those dashboards only, as dashboard-linter's do.
func (d *Dashboard) prometheus() bool {
	ds := d.datasourceVariables()
	return len(ds) > 0 && ds[0].Query == "prometheus"
}

// queryPanel reports whether a panel of type t shows query results: the
// panel rules read those. Text and list panels, which have no query, are
// left out.
func queryPanel(t string) bool {
	switch t {
	case "stat", "singlestat", "gauge", "bargauge", "graph", "table", "timeseries",
		"state-timeline", "status-history", "barchart", "piechart", "heatmap", "histogram":
		return true
	}
	return false
}
