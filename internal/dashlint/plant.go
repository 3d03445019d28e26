package dashlint

import (
	"encoding/json"
	"fmt"
)

// Plant returns a copy of a Prometheus dashboard's JSON with one breach
// of rule planted: in the job or instance variable, the first query panel
// or its first target. It is how a test shows that each rule, with the
// .lint file in force, still fails a dashboard that breaks it.
func Plant(rule string, dashboard []byte) ([]byte, error) {
	var d map[string]any
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, err
	}
	plant, ok := plants[rule]
	if !ok {
		return nil, fmt.Errorf("no plant for rule %s", rule)
	}
	if err := plant(d); err != nil {
		return nil, fmt.Errorf("planting %s: %w", rule, err)
	}
	return json.MarshalIndent(d, "", "  ")
}

// plants breach one rule each and, as far as they can, no other.
var plants = map[string]func(d map[string]any) error{
	"template-datasource-rule": func(d map[string]any) error {
		// A second data source variable: then neither may be called
		// plain datasource.
		vars, err := variables(d)
		if err != nil {
			return err
		}
		tm := d["templating"].(map[string]any)
		tm["list"] = append(vars, map[string]any{"name": "datasource2", "label": "Prometheus data source", "type": "datasource", "query": "prometheus"})
		return nil
	},
	"template-job-rule": func(d map[string]any) error {
		return setVariable(d, "job", "multi", false)
	},
	"template-instance-rule": func(d map[string]any) error {
		return setVariable(d, "instance", "allValue", "")
	},
	"template-label-promql-rule": func(d map[string]any) error {
		return setVariable(d, "job", "query", map[string]any{"query": `label_values(up{job=, job)`, "refId": "job"})
	},
	"template-on-time-change-reload-rule": func(d map[string]any) error {
		return setVariable(d, "instance", "refresh", 1)
	},
	"panel-datasource-rule": func(d map[string]any) error {
		return withPanel(d, func(p map[string]any) {
			p["datasource"] = map[string]any{"type": "prometheus", "uid": "planted-fixed-uid"}
		})
	},
	"panel-title-description-rule": func(d map[string]any) error {
		return withPanel(d, func(p map[string]any) { p["description"] = "" })
	},
	"panel-units-rule": func(d map[string]any) error {
		return withPanel(d, func(p map[string]any) {
			p["fieldConfig"] = map[string]any{"defaults": map[string]any{"unit": "wats"}, "overrides": []any{}}
			if o, ok := p["options"].(map[string]any); ok {
				delete(o, "reduceOptions")
			}
		})
	},
	"panel-no-targets-rule": func(d map[string]any) error {
		return withPanel(d, func(p map[string]any) { p["targets"] = []any{} })
	},
	"target-promql-rule":        setExpr(`sum(rate(up{job=~"$job",instance=~"$instance"}[$__rate_interval])`),
	"target-rate-interval-rule": setExpr(`sum(rate(process_cpu_seconds_total{job=~"$job",instance=~"$instance"}[5m]))`),
	"target-job-rule":           setExpr(`up{instance=~"$instance"}`),
	"target-instance-rule":      setExpr(`up{job=~"$job",instance="node:9841"}`),
	"target-counter-agg-rule":   setExpr(`sum(process_cpu_seconds_total{job=~"$job",instance=~"$instance"})`),
	"uneditable-dashboard": func(d map[string]any) error {
		d["editable"] = true
		return nil
	},
}

func variables(d map[string]any) ([]any, error) {
	tm, ok := d["templating"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("no templating")
	}
	list, ok := tm["list"].([]any)
	if !ok {
		return nil, fmt.Errorf("no templating list")
	}
	return list, nil
}

func setVariable(d map[string]any, name, key string, value any) error {
	vars, err := variables(d)
	if err != nil {
		return err
	}
	for _, v := range vars {
		if m, ok := v.(map[string]any); ok && m["name"] == name {
			m[key] = value
			return nil
		}
	}
	return fmt.Errorf("no %s variable", name)
}

// withPanel calls f with the first query panel that has a target.
func withPanel(d map[string]any, f func(p map[string]any)) error {
	var find func(ps []any) map[string]any
	find = func(ps []any) map[string]any {
		for _, x := range ps {
			p, ok := x.(map[string]any)
			if !ok {
				continue
			}
			if p["type"] == "row" {
				if sub, ok := p["panels"].([]any); ok {
					if q := find(sub); q != nil {
						return q
					}
				}
				continue
			}
			if t, _ := p["type"].(string); queryPanel(t) {
				if ts, ok := p["targets"].([]any); ok && len(ts) > 0 {
					return p
				}
			}
		}
		return nil
	}
	ps, _ := d["panels"].([]any)
	p := find(ps)
	if p == nil {
		return fmt.Errorf("no query panel with a target")
	}
	f(p)
	return nil
}

// setExpr replaces the first query panel's first target's query.
func setExpr(expr string) func(d map[string]any) error {
	return func(d map[string]any) error {
		return withPanel(d, func(p map[string]any) {
			p["targets"].([]any)[0].(map[string]any)["expr"] = expr
		})
	}
}
