package workload

import (
	"fmt"
	"strings"

	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// Config holds what a Parser can be told beyond the built-in layouts.
type Config struct {
	Slurm SlurmPatterns
}

// DefaultConfig returns the built-in layouts.
func DefaultConfig() Config { return Config{Slurm: DefaultSlurmPatterns()} }

// Parser turns cgroup paths into Identities using the path alone. It walks
// the grammars of the kinds table's rows (ident.Grammars; ident/grammar.go
// says how) and knows no layout itself. It holds only compiled rules and
// is safe for concurrent use.
type Parser struct {
	rules  []rule
	finish []func(ident.Identity) ident.Identity
}

// NewParser compiles the kinds table's grammars, with cfg's patterns in
// the slots they fill.
func NewParser(cfg Config) (*Parser, error) {
	slots := map[string]slotPatterns{}
	for _, f := range cfg.Slurm.slots() {
		slots[f.slot] = slotPatterns{label: "slurm " + f.field, patterns: *f.patterns}
	}
	p, err := compileGrammars(ident.Grammars(), slots)
	if err != nil {
		return nil, fmt.Errorf("workload parser: %w", err)
	}
	return p, nil
}

// defaultParser serves Parse. It is built once and only read afterwards.
var defaultParser = func() *Parser {
	p, err := NewParser(DefaultConfig())
	if err != nil {
		panic(err) // the built-in grammars are constants; a test covers them
	}
	return p
}()

// Parse returns the identity that the cgroup path (relative to the
// hierarchy root, as in stats.Workload.Cgroup) names, using the built-in
// layouts. It never touches the file system; names that only enrichment
// knows are left empty.
func Parse(path string) ident.Identity { return defaultParser.Parse(path) }

// Parse is the method form of the package-level Parse, using p's patterns.
func (p *Parser) Parse(path string) ident.Identity {
	id, _ := p.parse(path)
	return id
}

// parse also returns the prefix of path up to the innermost workload's own
// cgroup ("" for plain cgroups), which the Resolver uses to find the
// workload's processes.
//
// Components are read from the root down; each is offered to the rules in
// order (compileGrammars orders them), and the first whose context and
// flags hold and whose pattern matches says what the component makes of
// the cgroup. A component no rule takes is, inside a workload, a piece of
// it: the pieces below the innermost workload's cgroup, joined by "/",
// are its Part.
func (p *Parser) parse(path string) (ident.Identity, string) {
	id := ident.Identity{Kind: ident.KindCgroup}
	var flags uint64 // raised so far
	prev := 0        // the context the previous component left
	base := ""
	var part []string
	pos := 0
	for pos < len(path) {
		end := strings.IndexByte(path[pos:], '/')
		if end < 0 {
			end = len(path)
		} else {
			end += pos
		}
		c := path[pos:end]
		pos = end + 1
		if c == "" {
			continue
		}
		held := flags
		if id.Kind != ident.KindCgroup {
			held |= flagWorkload
		}
		cur, taken := 0, false
		for i := range p.rules {
			r := &p.rules[i]
			if r.after != 0 && r.after&(1<<prev) == 0 || held&r.need != r.need || held&r.deny != 0 {
				continue
			}
			a, loc, ok := r.match(c)
			if !ok {
				continue
			}
			if r.start != "" {
				id.Kind, id.Manager, id.ID, id.Name, id.Part = r.start, r.manager, "", "", ""
				part = part[:0]
				base = path[:end]
			}
			if r.plain != "" {
				id.Kind, id.Manager = ident.KindCgroup, r.plain
			}
			for _, s := range a.sets {
				s.apply(&id, c, loc)
			}
			if a.part != nil && id.Kind != ident.KindCgroup {
				part = append(part, a.part.expand(c, loc))
			}
			flags |= r.raise
			cur, taken = r.then, true
			break
		}
		if !taken && id.Kind != ident.KindCgroup {
			part = append(part, c)
		}
		prev = cur
	}
	for _, f := range p.finish {
		id = f(id)
	}
	if len(part) > 0 {
		if id.Part != "" {
			part = append([]string{id.Part}, part...)
		}
		id.Part = strings.Join(part, "/")
	}
	return id, base
}
