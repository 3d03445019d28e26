package dashlint

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Finding is one rule's complaint about one dashboard, panel or target.
type Finding struct {
	Rule      string
	Dashboard string // the dashboard's title
	Panel     string // the panel's title; "" for the dashboard
	Target    int    // the target's index in the panel; -1 for none
	RefID     string // the target's refId
	Message   string
	// Warning marks a finding the .lint file turns into a warning;
	// Excluded one it excludes. Reason is that entry's.
	Warning, Excluded bool
	Reason            string
}

func (f Finding) String() string {
	where := f.Dashboard
	if f.Panel != "" {
		where += " / " + f.Panel
	}
	if f.Target >= 0 {
		where += fmt.Sprintf(" / target %d (%s)", f.Target, f.RefID)
	}
	s := fmt.Sprintf("[%s] %s: %s", f.Rule, where, f.Message)
	switch {
	case f.Excluded:
		s += " (excluded: " + f.Reason + ")"
	case f.Warning:
		s = "warning " + s + " (" + f.Reason + ")"
	}
	return s
}

// Rule is one lint rule.
type Rule struct {
	Name string
	// Description says what the rule checks and, where it does not check
	// what dashboard-linter's rule of that name does, how it differs.
	Description string
	check       func(d *Dashboard, r *report)
}

// report collects one rule's findings on one dashboard.
type report struct {
	rule string
	d    *Dashboard
	out  []Finding
}

func (r *report) dashboard(format string, a ...any) {
	r.out = append(r.out, Finding{Rule: r.rule, Dashboard: r.d.Title, Target: -1, Message: fmt.Sprintf(format, a...)})
}

func (r *report) panel(p *Panel, format string, a ...any) {
	r.out = append(r.out, Finding{Rule: r.rule, Dashboard: r.d.Title, Panel: p.Title, Target: -1, Message: fmt.Sprintf(format, a...)})
}

func (r *report) target(p *Panel, i int, format string, a ...any) {
	r.out = append(r.out, Finding{Rule: r.rule, Dashboard: r.d.Title, Panel: p.Title, Target: i, RefID: p.Targets[i].RefID, Message: fmt.Sprintf(format, a...)})
}

// Rules returns every rule, in the order they run.
func Rules() []Rule {
	return []Rule{
		{"template-datasource-rule", "The dashboard has a data source variable: `datasource` (labelled \"Data source\") when it is the only one, else `<type>_datasource`. A wrong label is a warning.", checkTemplateDatasource},
		{"template-job-rule", "A Prometheus dashboard has a `job` variable: a query over $datasource, multi-select, allValue `.+`, labelled \"Job\" (a wrong label is a warning).", checkTemplateVar("job")},
		{"template-instance-rule", "A Prometheus dashboard has an `instance` variable, as for job.", checkTemplateVar("instance")},
		{"template-label-promql-rule", "Every query variable of a Prometheus dashboard is label_names(), label_values(), metrics() or query_result() with valid PromQL and label names. Unlike dashboard-linter, a selector that does not parse fails even where the parser salvages part of it.", checkTemplateQueries},
		{"template-on-time-change-reload-rule", "Every query variable is refreshed on time range change (refresh 2).", checkTemplateRefresh},
		{"panel-datasource-rule", "Every query panel, and every target that names a data source, uses a data source variable ($datasource or ${datasource}). dashboard-linter checks the panels of four types and no target.", checkPanelDatasource},
		{"panel-title-description-rule", "Every query panel has a title and a description.", checkPanelTitle},
		{"panel-units-rule", "Every query panel has a unit Grafana knows (or a custom one: suffix:, prefix:, si:, count:, currency:, time:), unless it maps values or a stat panel shows non-numeric fields.", checkPanelUnits},
		{"panel-no-targets-rule", "Every query panel has at least one target.", checkPanelTargets},
		{"target-promql-rule", "Every target of a Prometheus dashboard is valid PromQL once Grafana's variables are substituted.", checkTargetPromQL},
		{"target-rate-interval-rule", "rate() and irate() read [$__rate_interval]; every other range (increase(), *_over_time(), a subquery) reads [$__rate_interval] or [$__range], never a fixed one. dashboard-linter checks rate() and irate() only.", checkTargetRanges},
		{"target-job-rule", "Every selector of a Prometheus dashboard's targets has job=~\"$job\".", checkTargetMatcher("job")},
		{"target-instance-rule", "Every selector has instance=~\"$instance\".", checkTargetMatcher("instance")},
		{"target-counter-agg-rule", "A counter (a metric name ending in _total) is read only through rate(), irate() or increase(). dashboard-linter tests the selector's text, so a counter with matchers passes it; this rule tests the metric's name.", checkCounterAgg},
		{"uneditable-dashboard", "The dashboard is not editable: it is declared as code (editable false).", checkUneditable},
	}
}

func checkTemplateDatasource(d *Dashboard, r *report) {
	ds := d.datasourceVariables()
	if len(ds) == 0 {
		r.dashboard("no data source variable")
		return
	}
	for _, v := range ds {
		name, label := v.Query+"_datasource", strings.ToUpper(v.Query[:min(1, len(v.Query))])+v.Query[min(1, len(v.Query)):]+" data source"
		names, labels := []string{name}, []string{label}
		if len(ds) == 1 {
			names, labels = append(names, "datasource"), append(labels, "Data source")
		}
		if !slices.Contains(names, v.Name) {
			r.dashboard("data source variable %q: want it named %s", v.Name, strings.Join(names, " or "))
		}
		if !slices.Contains(labels, v.Label) {
			r.out = append(r.out, Finding{Rule: r.rule, Dashboard: d.Title, Target: -1, Warning: true, Reason: "a label is advice",
				Message: fmt.Sprintf("data source variable %q is labelled %q: want %s", v.Name, v.Label, strings.Join(labels, " or "))})
		}
	}
}

// usesDatasourceVariable reports whether uid names one of d's data
// source variables.
func usesDatasourceVariable(d *Dashboard, uid string) bool {
	for _, v := range d.datasourceVariables() {
		if uid == "$"+v.Name || uid == "${"+v.Name+"}" {
			return true
		}
	}
	return false
}

func checkTemplateVar(name string) func(d *Dashboard, r *report) {
	return func(d *Dashboard, r *report) {
		if !d.prometheus() {
			return
		}
		v := d.variable(name)
		if v == nil {
			r.dashboard("no %s variable", name)
			return
		}
		if v.Datasource == nil || !usesDatasourceVariable(d, v.Datasource.UID) {
			uid := ""
			if v.Datasource != nil {
				uid = v.Datasource.UID
			}
			r.dashboard("variable %s: data source %q, want $datasource", name, uid)
		}
		if v.Type != "query" {
			r.dashboard("variable %s: type %q, want a Prometheus query", name, v.Type)
		}
		if !v.Multi {
			r.dashboard("variable %s: not multi-select", name)
		}
		if v.AllValue != ".+" {
			r.dashboard("variable %s: allValue %q, want .+", name, v.AllValue)
		}
		if want := strings.ToUpper(name[:1]) + name[1:]; v.Label != want {
			r.out = append(r.out, Finding{Rule: r.rule, Dashboard: d.Title, Target: -1, Warning: true, Reason: "a label is advice",
				Message: fmt.Sprintf("variable %s is labelled %q, want %q", name, v.Label, want)})
		}
	}
}

var (
	variableCall = regexp.MustCompile(`^\s*(\w+)\s*\((.*)\)\s*$`)
	labelName    = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// checkVariableQuery checks a Prometheus query variable's query: one of
// Grafana's functions with a valid argument.
func checkVariableQuery(q string) error {
	m := variableCall.FindStringSubmatch(q)
	if m == nil {
		return fmt.Errorf("not label_names(), label_values(), metrics() or query_result()")
	}
	fn, arg := m[1], strings.TrimSpace(m[2])
	selector := func(s string) error {
		e, err := parsePromQL(s)
		if err != nil {
			return err
		}
		if _, ok := e.(*parser.VectorSelector); !ok {
			return fmt.Errorf("%s is not a series selector", s)
		}
		return nil
	}
	switch fn {
	case "label_names":
		if arg == "" {
			return nil
		}
		return selector(arg)
	case "label_values":
		sel, label := "", arg
		if i := strings.LastIndexByte(arg, ','); i >= 0 {
			sel, label = strings.TrimSpace(arg[:i]), strings.TrimSpace(arg[i+1:])
		}
		if !labelName.MatchString(label) {
			return fmt.Errorf("label %q is not a label name", label)
		}
		if sel == "" {
			return nil
		}
		return selector(sel)
	case "metrics":
		_, err := regexp.Compile(arg)
		return err
	case "query_result":
		_, err := parsePromQL(arg)
		return err
	}
	return fmt.Errorf("unknown function %s()", fn)
}

func checkTemplateQueries(d *Dashboard, r *report) {
	if !d.prometheus() {
		return
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if err := checkVariableQuery(v.Query); err != nil {
			r.dashboard("variable %s: query %q: %v", v.Name, v.Query, err)
		}
	}
}

func checkTemplateRefresh(d *Dashboard, r *report) {
	for _, v := range d.Templating.List {
		if v.Type == "query" && v.Refresh != 2 {
			r.dashboard("variable %s: refresh %d, want 2 (on time range change)", v.Name, v.Refresh)
		}
	}
}

func checkPanelDatasource(d *Dashboard, r *report) {
	for _, p := range d.AllPanels() {
		if !queryPanel(p.Type) {
			continue
		}
		if p.Datasource == nil || !usesDatasourceVariable(d, p.Datasource.UID) {
			uid := ""
			if p.Datasource != nil {
				uid = p.Datasource.UID
			}
			r.panel(p, "data source %q: want a data source variable", uid)
		}
		for i, t := range p.Targets {
			if t.Datasource != nil && !usesDatasourceVariable(d, t.Datasource.UID) {
				r.target(p, i, "data source %q: want a data source variable", t.Datasource.UID)
			}
		}
	}
}

func checkPanelTitle(d *Dashboard, r *report) {
	for _, p := range d.AllPanels() {
		if queryPanel(p.Type) && (strings.TrimSpace(p.Title) == "" || strings.TrimSpace(p.Description) == "") {
			r.panel(p, "title %q, description %q: want both", p.Title, p.Description)
		}
	}
}

// unit returns the unit a panel shows: an override's, else the default.
func (p *Panel) unit() string {
	u := ""
	for _, o := range p.FieldConfig.Overrides {
		for _, pr := range o.Properties {
			if pr.ID == "unit" {
				_ = jsonString(pr.Value, &u)
			}
		}
	}
	if u == "" {
		u = p.FieldConfig.Defaults.Unit
	}
	return u
}

// mapsValues reports whether the panel maps values to text, which then
// need no unit.
func (p *Panel) mapsValues() bool {
	if m := strings.TrimSpace(string(p.FieldConfig.Defaults.Mappings)); m != "" && m != "null" && m != "[]" {
		return true
	}
	for _, o := range p.FieldConfig.Overrides {
		for _, pr := range o.Properties {
			if v := strings.TrimSpace(string(pr.Value)); pr.ID == "mappings" && v != "" && v != "null" && v != "[]" {
				return true
			}
		}
	}
	return false
}

func checkPanelUnits(d *Dashboard, r *report) {
	for _, p := range d.AllPanels() {
		if !queryPanel(p.Type) || p.mapsValues() || (p.Type == "stat" && p.Options.ReduceOptions.Fields != "") {
			continue
		}
		if u := p.unit(); !validUnit(u) {
			r.panel(p, "unit %q: want one Grafana knows", u)
		}
	}
}

func checkPanelTargets(d *Dashboard, r *report) {
	for _, p := range d.AllPanels() {
		if queryPanel(p.Type) && len(p.Targets) == 0 {
			r.panel(p, "no target")
		}
	}
}

// eachQuery calls f with every target of the query panels of a Prometheus
// dashboard whose query parses.
func eachQuery(d *Dashboard, f func(p *Panel, i int, e parser.Expr)) {
	if !d.prometheus() {
		return
	}
	for _, p := range d.AllPanels() {
		if !queryPanel(p.Type) {
			continue
		}
		for i, t := range p.Targets {
			if e, err := parsePromQL(t.Expr); err == nil {
				f(p, i, e)
			}
		}
	}
}

func checkTargetPromQL(d *Dashboard, r *report) {
	if !d.prometheus() {
		return
	}
	for _, p := range d.AllPanels() {
		if !queryPanel(p.Type) {
			continue
		}
		for i, t := range p.Targets {
			if strings.TrimSpace(t.Expr) == "" {
				r.target(p, i, "empty query")
				continue
			}
			if _, err := parsePromQL(t.Expr); err != nil {
				r.target(p, i, "%q: %v", t.Expr, err)
			}
		}
	}
}

func checkTargetRanges(d *Dashboard, r *report) {
	eachQuery(d, func(p *Panel, i int, e parser.Expr) {
		walk(e, func(n parser.Node, path []parser.Node) {
			var rng time.Duration
			switch n := n.(type) {
			case *parser.MatrixSelector:
				rng = n.Range
				if len(path) > 0 {
					if c, ok := path[len(path)-1].(*parser.Call); ok && (c.Func.Name == "rate" || c.Func.Name == "irate") {
						if rng != rateInterval {
							r.target(p, i, "%s() over [%s]: want [$__rate_interval]", c.Func.Name, rangeName(rng))
						}
						return
					}
				}
			case *parser.SubqueryExpr:
				rng = n.Range
			default:
				return
			}
			if rng != rateInterval && rng != rangeAll {
				r.target(p, i, "range [%s]: want [$__rate_interval] or [$__range], not a fixed one", rangeName(rng))
			}
		})
	})
}

func checkTargetMatcher(label string) func(d *Dashboard, r *report) {
	return func(d *Dashboard, r *report) {
		eachQuery(d, func(p *Panel, i int, e parser.Expr) {
			walk(e, func(n parser.Node, _ []parser.Node) {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return
				}
				for _, m := range vs.LabelMatchers {
					if m.Name == label && m.Type == labels.MatchRegexp && (m.Value == "$"+label || m.Value == "${"+label+"}") {
						return
					}
				}
				r.target(p, i, "%s: no %s=~\"$%s\" matcher", vs, label, label)
			})
		})
	}
}

func checkCounterAgg(d *Dashboard, r *report) {
	eachQuery(d, func(p *Panel, i int, e parser.Expr) {
		walk(e, func(n parser.Node, path []parser.Node) {
			vs, ok := n.(*parser.VectorSelector)
			if !ok || !isCounter(vs) {
				return
			}
			if len(path) >= 2 {
				if _, ok := path[len(path)-1].(*parser.MatrixSelector); ok {
					if c, ok := path[len(path)-2].(*parser.Call); ok && slices.Contains([]string{"rate", "irate", "increase"}, c.Func.Name) {
						return
					}
				}
			}
			r.target(p, i, "counter %s read without rate(), irate() or increase()", vs)
		})
	})
}

func checkUneditable(d *Dashboard, r *report) {
	if d.Editable {
		r.dashboard("editable: want false, the dashboard is declared as code")
	}
}
