package guard

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Source is where the value of an owner matcher comes from.
type Source string

// The sources of owner matchers.
const (
	// SourceUser: the caller's user name, as an equality matcher.
	SourceUser Source = "user"
	// SourceProjects: the caller's projects in the units store
	// (Slurm accounts, Kubernetes namespaces), as a regex alternation.
	SourceProjects Source = "projects"
	// SourceVMs: the ids of the caller's VM units in the units store.
	SourceVMs Source = "vms"
)

// Rule says that the series of the families whose name matches Family
// belong to whoever Label's value (from Source) names. Several rules may
// match one family: all their matchers are added.
type Rule struct {
	// Family matches metric names, anchored at both ends as PromQL's
	// regex matchers are.
	Family *regexp.Regexp
	Label  string
	Source Source
}

// ParseRule reads a rule written as FAMILY_REGEX=LABEL:SOURCE, e.g.
// `wattrace_job_.*=user:user` (the form of guard.families).
func ParseRule(s string) (Rule, error) {
	re, owner, ok := strings.Cut(s, "=")
	label, src, ok2 := strings.Cut(owner, ":")
	if !ok || !ok2 || re == "" {
		return Rule{}, fmt.Errorf("rule %q: want FAMILY_REGEX=LABEL:SOURCE, e.g. wattrace_job_.*=user:user", s)
	}
	fam, err := anchored(re)
	if err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", s, err)
	}
	if !labelName.MatchString(label) || label == model.MetricNameLabel {
		return Rule{}, fmt.Errorf("rule %q: %q is not a label name", s, label)
	}
	switch Source(src) {
	case SourceUser, SourceProjects, SourceVMs:
	default:
		return Rule{}, fmt.Errorf("rule %q: source %q: want user, projects or vms", s, src)
	}
	return Rule{Family: fam, Label: label, Source: Source(src)}, nil
}

// DefaultRules are the exporter's workload families and their owners: a
// Slurm or PBS job's series carry its user, pods and containers their namespace (a
// project in the units store), VMs their uuid (a VM unit in the store).
func DefaultRules() []string {
	return []string{
		"wattrace_job_.*=user:user",
		"wattrace_pbs_job_.*=user:user",
		"wattrace_pod_.*=namespace:projects",
		"wattrace_container_.*=namespace:projects",
		"wattrace_vm_.*=vm_uuid:vms",
	}
}

// anchored compiles a family regex the way PromQL anchors its regex
// matchers, so `wattrace_job_.*` cannot match `x_wattrace_job_y`.
func anchored(re string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?:" + re + ")$")
}

// ParsePublic compiles the public family regexes (guard.public).
func ParsePublic(list []string) ([]*regexp.Regexp, error) {
	out := make([]*regexp.Regexp, 0, len(list))
	for _, s := range list {
		re, err := anchored(s)
		if err != nil {
			return nil, fmt.Errorf("public family %q: %w", s, err)
		}
		out = append(out, re)
	}
	return out, nil
}

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// ValidLabelName reports whether s is a label name the guard writes into
// matchers (the legacy character set: owner and cluster labels are the
// exporter's and the TSDB's own).
func ValidLabelName(s string) bool { return labelName.MatchString(s) }

// Policy is what a non-admin may read, and how their selectors are
// narrowed to it.
type Policy struct {
	Rules []Rule
	// Public families pass unchanged (but for the cluster matcher).
	Public []*regexp.Regexp
	// ClusterLabel, when set, is matched to Cluster on every selector.
	ClusterLabel, Cluster string
}

// Resolve returns the values of a source for the caller (memoised by the
// handler for one request): the user name, their projects or their VMs.
type Resolve func(Source) ([]string, error)

// Error is a refusal: its Status and Prometheus's errorType.
type Error struct {
	Status int
	Type   string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// HTTPStatus is the status the refusal is answered with.
func (e *Error) HTTPStatus() int { return e.Status }

func forbidden(format string, a ...any) error {
	return &Error{http.StatusForbidden, "forbidden", fmt.Sprintf(format, a...)}
}

func badData(format string, a ...any) error {
	return &Error{http.StatusBadRequest, "bad_data", fmt.Sprintf(format, a...)}
}

// family returns the metric name a selector's `__name__` equality names:
// the only thing that ties a selector to one family. A selector without
// one, or with two that differ (which select nothing, but are refused
// rather than reasoned about), has no family.
func family(ms []*labels.Matcher) (string, bool) {
	name := ""
	for _, m := range ms {
		if m.Name != model.MetricNameLabel || m.Type != labels.MatchEqual {
			continue
		}
		if name != "" && name != m.Value {
			return "", false
		}
		name = m.Value
	}
	return name, name != ""
}

// owners returns the matchers a non-admin's selector of family name must
// carry, or a refusal.
func (p *Policy) owners(name string, resolve Resolve) ([]*labels.Matcher, error) {
	var out []*labels.Matcher
	for _, r := range p.Rules {
		if !r.Family.MatchString(name) {
			continue
		}
		m, err := ownerMatcher(r, resolve)
		var e *Error
		if errors.As(err, &e) {
			return nil, &Error{e.Status, e.Type, name + ": " + e.Msg}
		}
		if err != nil {
			return nil, fmt.Errorf("owner matcher of %s: %w", name, err)
		}
		out = append(out, m)
	}
	if out == nil && !p.public(name) {
		return nil, forbidden("%s: not a family you may read (ask an admin to list it in guard.public)", name)
	}
	if p.ClusterLabel != "" {
		out = append(out, labels.MustNewMatcher(labels.MatchEqual, p.ClusterLabel, p.Cluster))
	}
	return out, nil
}

// ownerMatcher is the matcher rule r adds for the caller; a refusal when
// they own nothing of its kind (no project, no VM).
func ownerMatcher(r Rule, resolve Resolve) (*labels.Matcher, error) {
	vals, err := resolve(r.Source)
	if err != nil {
		return nil, err
	}
	vals = slices.DeleteFunc(slices.Clone(vals), func(v string) bool { return v == "" })
	switch {
	case len(vals) == 0:
		return nil, forbidden("no %s of yours to read it by", r.Source)
	case r.Source == SourceUser:
		return labels.NewMatcher(labels.MatchEqual, r.Label, vals[0])
	}
	// A regex alternation of literal values: PromQL anchors it, and
	// QuoteMeta keeps a project called `.*` a literal.
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = regexp.QuoteMeta(v)
	}
	return labels.NewMatcher(labels.MatchRegexp, r.Label, strings.Join(q, "|"))
}

func (p *Policy) public(name string) bool {
	for _, re := range p.Public {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// ScopeMatchers returns a selector's matchers with its owner matchers
// appended: the user's own are kept, so a widening regex such as
// user=~"alice|bob" is intersected with user="alice".
func (p *Policy) ScopeMatchers(ms []*labels.Matcher, resolve Resolve) ([]*labels.Matcher, error) {
	name, ok := family(ms)
	if !ok {
		return nil, forbidden("selector %s names no single metric (__name__=\"…\"): every selector must name its family", selectorString(ms))
	}
	add, err := p.owners(name, resolve)
	if err != nil {
		return nil, err
	}
	return append(slices.Clip(ms), add...), nil
}

// ScopeExpr narrows every selector of expr, in place: those in matrix
// selectors, subqueries, function arguments, both sides of binary
// operations, with `@` or offset. Functions that read series the AST
// does not name (info, which joins target_info) are refused.
func (p *Policy) ScopeExpr(expr parser.Expr, resolve Resolve) error {
	var err error
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.Call:
			if n.Func != nil && unscopable(n.Func.Name) {
				err = forbidden("function %s() reads series no selector names, which cannot be scoped", n.Func.Name)
			}
		case *parser.VectorSelector:
			n.LabelMatchers, err = p.ScopeMatchers(n.LabelMatchers, resolve)
		}
		return err
	})
	return err
}

// unscopable reports the functions that read series besides their
// arguments'.
func unscopable(fn string) bool { return fn == "info" }

// Check verifies that every selector of expr carries the owner matchers
// that ScopeExpr adds, reading nothing but the AST: the handler runs it on
// the re-parsed text it is about to forward, so a printer that dropped
// or mangled a matcher cannot widen what is read.
func (p *Policy) Check(expr parser.Expr, resolve Resolve) error {
	var err error
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.Call:
			if n.Func != nil && unscopable(n.Func.Name) {
				err = forbidden("function %s() cannot be scoped", n.Func.Name)
			}
		case *parser.VectorSelector:
			err = p.CheckMatchers(n.LabelMatchers, resolve)
		}
		return err
	})
	return err
}

// CheckMatchers verifies one selector's matchers (see Check).
func (p *Policy) CheckMatchers(ms []*labels.Matcher, resolve Resolve) error {
	name, ok := family(ms)
	if !ok {
		return forbidden("selector %s names no single metric", selectorString(ms))
	}
	want, err := p.owners(name, resolve)
	if err != nil {
		return err
	}
	for _, w := range want {
		if !slices.ContainsFunc(ms, func(m *labels.Matcher) bool {
			return m.Name == w.Name && m.Type == w.Type && m.Value == w.Value
		}) {
			return errors.New("guard: scoped selector " + selectorString(ms) + " lacks " + w.String())
		}
	}
	return nil
}

func selectorString(ms []*labels.Matcher) string {
	return clip((&parser.VectorSelector{LabelMatchers: ms}).String())
}

// clip shortens what a user sent before it is echoed in an error.
func clip(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
