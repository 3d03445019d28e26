package dashlint

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Grafana's range variables are replaced, before a query is parsed, by
// durations no dashboard writes, so that a parsed range says which
// variable it was.
const (
	rateInterval = 1111111 * time.Second // $__rate_interval
	rangeAll     = 2222222 * time.Second // $__range
	interval     = 3333333 * time.Second // $__interval
)

// globals are Grafana's built-in variables, as their stand-ins.
var globals = map[string]string{
	"__rate_interval": strconv.Itoa(int(rateInterval.Seconds())) + "s",
	"__range":         strconv.Itoa(int(rangeAll.Seconds())) + "s",
	"__interval":      strconv.Itoa(int(interval.Seconds())) + "s",
	"__auto":          strconv.Itoa(int(interval.Seconds())) + "s",
	"__range_s":       "2222222",
	"__range_ms":      "2222222000",
	"__interval_ms":   "3333333000",
}

// varRef is a variable reference at the start of a string: $name, ${name}
// or ${name:format}, or [[name]].
var varRef = regexp.MustCompile(`^(?:\$(\w+)|\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\])`)

// expand replaces the variables of expr that stand outside string
// literals by values that parse: Grafana's built-in ones by the stand-ins
// above, a template variable by its own name (a label name or metric name
// where one is expected). Inside a string, a reference stays as written,
// so a matcher's value reads job=~"$job".
func expand(expr string) string {
	var b strings.Builder
	for i := 0; i < len(expr); {
		c := expr[i]
		if c == '"' || c == '\'' || c == '`' {
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j < len(expr) {
				j++
			}
			b.WriteString(expr[i:j])
			i = j
			continue
		}
		m := varRef.FindStringSubmatchIndex(expr[i:])
		if m == nil {
			b.WriteByte(c)
			i++
			continue
		}
		name := ""
		for g := 2; g < len(m); g += 2 {
			if m[g] >= 0 {
				name = expr[i+m[g] : i+m[g+1]]
			}
		}
		if v, ok := globals[name]; ok {
			b.WriteString(v)
		} else {
			b.WriteString(name)
		}
		i += m[1]
	}
	return b.String()
}

var promParser = parser.NewParser(parser.Options{EnableExperimentalFunctions: true})

// parsePromQL parses expr with its variables expanded.
func parsePromQL(expr string) (parser.Expr, error) {
	e, err := promParser.ParseExpr(expand(expr))
	if err != nil {
		return nil, err
	}
	return e, nil
}

// walk calls f for every node of e with the path from the root to it (a
// copy, f may keep it).
func walk(e parser.Expr, f func(n parser.Node, path []parser.Node)) {
	var visit func(n parser.Node, path []parser.Node)
	visit = func(n parser.Node, path []parser.Node) {
		f(n, path)
		here := append(append([]parser.Node(nil), path...), n)
		for c := range parser.ChildrenIter(n) {
			visit(c, here)
		}
	}
	visit(e, nil)
}

// metricName returns the metric a selector names (by name or by an
// equality matcher on __name__), or the regular expression of a regex
// matcher on __name__ with regex set.
func metricName(vs *parser.VectorSelector) (name string, regex bool) {
	if vs.Name != "" {
		return vs.Name, false
	}
	for _, m := range vs.LabelMatchers {
		if m.Name != model.MetricNameLabel {
			continue
		}
		switch m.Type {
		case labels.MatchEqual:
			return m.Value, false
		case labels.MatchRegexp:
			return m.Value, true
		}
	}
	return "", false
}

// isCounter reports whether a selector reads counters: a name ending in
// _total, or a name pattern all of whose names do.
func isCounter(vs *parser.VectorSelector) bool {
	name, regex := metricName(vs)
	if !regex {
		return strings.HasSuffix(name, "_total")
	}
	return strings.HasSuffix(strings.TrimSuffix(name, ")"), "_total")
}

// rangeName names a range as the dashboard wrote it.
func rangeName(d time.Duration) string {
	switch d {
	case rateInterval:
		return "$__rate_interval"
	case rangeAll:
		return "$__range"
	case interval:
		return "$__interval"
	}
	return d.String()
}
