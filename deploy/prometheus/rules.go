// Package prometheus holds wattrace's Prometheus recording rules and alerts
// (wattrace.rules.yml, wattrace.alerts.yml) and reads their expressions,
// for the end-to-end test that evaluates them against a real Prometheus.
// The tests check the files with promtool, which comes from Debian's
// prometheus package and is installed when missing.
package prometheus

import (
	"embed"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// FS holds the rule files.
//
//go:embed wattrace.rules.yml wattrace.alerts.yml
var FS embed.FS

// Files are the rule files, in loading order.
var Files = []string{"wattrace.rules.yml", "wattrace.alerts.yml"}

// Rule is a recording rule or an alert.
type Rule struct {
	File, Group   string
	Record, Alert string
	Expr          string
}

// Name is the recorded series' name or the alert's.
func (r Rule) Name() string {
	if r.Record != "" {
		return r.Record
	}
	return r.Alert
}

// Rules parses every rule of Files.
func Rules() ([]Rule, error) {
	var out []Rule
	for _, f := range Files {
		b, err := FS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var doc struct {
			Groups []struct {
				Name  string `yaml:"name"`
				Rules []struct {
					Record string `yaml:"record"`
					Alert  string `yaml:"alert"`
					Expr   string `yaml:"expr"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, g := range doc.Groups {
			for _, r := range g.Rules {
				out = append(out, Rule{File: f, Group: g.Name, Record: r.Record, Alert: r.Alert, Expr: r.Expr})
			}
		}
	}
	return out, nil
}
