package workload

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// flagWorkload is ident.FlagWorkload's bit: the parser sets it while the
// cgroup is in a workload. Raised flags take the bits above it.
const flagWorkload uint64 = 1

// rule is an ident.Rule compiled: contexts and flags as bits, patterns
// compiled with their templates.
type rule struct {
	after, need, deny, raise uint64
	then                     int
	start                    ident.Kind
	manager, plain           string
	is                       []string
	// alts holds one alternative per pattern, or for Is the one whose
	// templates read the component only.
	alts []alt
}

// alt is one pattern of a rule and what its match sets.
type alt struct {
	re *regexp.Regexp
	// prefix and suffix are literal text every match starts and ends
	// with, tested before the expression runs.
	prefix, suffix string
	// groups: a template reads a group, so a match needs its indices.
	groups bool
	sets   []set
	part   template
}

type set struct {
	field    ident.Field
	value    template
	decode   ident.Decode
	only     *regexp.Regexp
	nonEmpty bool
}

// piece is literal text (group == pieceText), the component (group 0), a
// group of the match, or a group the pattern lacks (pieceAbsent, "").
type piece struct {
	text  string
	group int
}

const (
	pieceText   = -1
	pieceAbsent = -2
)

type template []piece

// match reports whether c matches r, with the alternative that matched
// and its group indices (nil when no template reads a group).
func (r *rule) match(c string) (*alt, []int, bool) {
	if r.is != nil {
		for _, s := range r.is {
			if c == s {
				return &r.alts[0], nil, true
			}
		}
		return nil, nil, false
	}
	for i := range r.alts {
		a := &r.alts[i]
		if !strings.HasPrefix(c, a.prefix) || !strings.HasSuffix(c, a.suffix) || !a.re.MatchString(c) {
			continue
		}
		if !a.groups {
			return a, nil, true
		}
		return a, a.re.FindStringSubmatchIndex(c), true
	}
	return nil, nil, false
}

func (t template) expand(c string, loc []int) string {
	if len(t) == 1 {
		return t[0].expand(c, loc)
	}
	var b strings.Builder
	for _, p := range t {
		b.WriteString(p.expand(c, loc))
	}
	return b.String()
}

func (p piece) expand(c string, loc []int) string {
	switch {
	case p.group == pieceText:
		return p.text
	case p.group == 0:
		return c
	case p.group == pieceAbsent || loc[2*p.group] < 0:
		return ""
	}
	return c[loc[2*p.group]:loc[2*p.group+1]]
}

func (s *set) apply(id *ident.Identity, c string, loc []int) {
	v := s.value.expand(c, loc)
	switch s.decode {
	case ident.DecodeUnit:
		v = unescapeUnit(v)
	case ident.DecodeDashes:
		v = strings.ReplaceAll(v, "_", "-")
	}
	if s.only != nil && !s.only.MatchString(v) {
		v = ""
	}
	if s.nonEmpty && v == "" {
		return
	}
	*id.Ref(s.field) = v
}

// slotPatterns are the patterns a configuration puts in a slot, and the
// name its errors give them ("slurm Job").
type slotPatterns struct {
	label    string
	patterns []string
}

// compileGrammars compiles the grammars into rules in the order the parser
// tries them: by the grammars' Rank, then their order, then the rules'
// order within each. A slot's rules take slots' patterns in place of
// their own.
func compileGrammars(gs []ident.KindGrammar, slots map[string]slotPatterns) (*Parser, error) {
	gs = slices.Clone(gs)
	slices.SortStableFunc(gs, func(a, b ident.KindGrammar) int { return cmp.Compare(a.Grammar.Rank, b.Grammar.Rank) })
	ctx, flag := map[string]int{"": 0}, map[string]uint64{ident.FlagWorkload: flagWorkload}
	slotOf := map[string][]string{}
	for _, g := range gs {
		for i, r := range g.Grammar.Rules {
			if r.Then != "" && ctx[r.Then] == 0 {
				if len(ctx) == 64 {
					return nil, fmt.Errorf("%s grammar, rule %d: more than 63 contexts", g.Kind, i)
				}
				ctx[r.Then] = len(ctx)
			}
			for _, f := range r.Raise {
				if f == ident.FlagWorkload {
					return nil, fmt.Errorf("%s grammar, rule %d: %s is the parser's, not raised", g.Kind, i, f)
				}
				if flag[f] == 0 {
					if len(flag) == 64 {
						return nil, fmt.Errorf("%s grammar, rule %d: more than 63 flags", g.Kind, i)
					}
					flag[f] = 1 << len(flag)
				}
			}
			if r.Slot != "" {
				if prev, ok := slotOf[r.Slot]; ok && !slices.Equal(prev, r.Pattern) {
					return nil, fmt.Errorf("%s grammar, rule %d: slot %s with other patterns than its other rules'", g.Kind, i, r.Slot)
				}
				slotOf[r.Slot] = r.Pattern
			}
		}
	}
	p := &Parser{}
	for _, g := range gs {
		for i, r := range g.Grammar.Rules {
			cr, err := compileRule(r, ctx, flag, slots)
			if err != nil {
				if s, ok := slots[r.Slot]; ok {
					return nil, fmt.Errorf("%s pattern: %w", s.label, err)
				}
				return nil, fmt.Errorf("%s grammar, rule %d: %w", g.Kind, i, err)
			}
			p.rules = append(p.rules, cr)
		}
		if g.Grammar.Finish != nil {
			p.finish = append(p.finish, g.Grammar.Finish)
		}
	}
	return p, nil
}

func compileRule(r ident.Rule, ctx map[string]int, flag map[string]uint64, slots map[string]slotPatterns) (rule, error) {
	cr := rule{then: ctx[r.Then], start: r.Start, manager: r.Manager, plain: r.Plain, is: r.Is}
	if r.Start != "" && r.Plain != "" {
		return rule{}, errors.New("both Start and Plain")
	}
	for _, a := range r.After {
		n, ok := ctx[a]
		if !ok || a == "" {
			return rule{}, fmt.Errorf("context %q, which no rule leaves", a)
		}
		cr.after |= 1 << n
	}
	for _, fs := range []struct {
		names []string
		dst   *uint64
	}{{r.If, &cr.need}, {r.Unless, &cr.deny}, {r.Raise, &cr.raise}} {
		for _, f := range fs.names {
			b, ok := flag[f]
			if !ok {
				return rule{}, fmt.Errorf("flag %q, which no rule raises", f)
			}
			*fs.dst |= b
		}
	}
	patterns := r.Pattern
	if s, ok := slots[r.Slot]; ok && r.Slot != "" {
		patterns = s.patterns
	}
	switch {
	case len(r.Is) > 0 && len(r.Pattern) > 0:
		return rule{}, errors.New("both Is and Pattern")
	case len(r.Is) > 0:
		a, err := compileAlt(r, nil)
		if err != nil {
			return rule{}, err
		}
		cr.alts = []alt{a}
		return cr, nil
	case len(r.Pattern) == 0:
		return rule{}, errors.New("neither Is nor Pattern")
	}
	cr.alts = []alt{} // a slot emptied by the configuration matches nothing
	for _, src := range patterns {
		re, err := regexp.Compile(src)
		if err != nil {
			return rule{}, fmt.Errorf("compile %q: %w", src, err)
		}
		a, err := compileAlt(r, re)
		if err != nil {
			return rule{}, fmt.Errorf("%q %w", src, err)
		}
		a.prefix, a.suffix = literalEnds(src)
		cr.alts = append(cr.alts, a)
	}
	return cr, nil
}

// compileAlt compiles r's templates for one of its patterns (nil for Is).
func compileAlt(r ident.Rule, re *regexp.Regexp) (alt, error) {
	a := alt{re: re}
	compile := func(src string) (template, error) {
		t, groups, err := compileTemplate(src, re, r.Optional)
		a.groups = a.groups || groups
		return t, err
	}
	var probe ident.Identity
	for _, s := range r.Set {
		if probe.Ref(s.Field) == nil {
			return alt{}, fmt.Errorf("sets unknown field %d", s.Field)
		}
		t, err := compile(s.Value)
		if err != nil {
			return alt{}, err
		}
		cs := set{field: s.Field, value: t, decode: s.Decode, nonEmpty: s.NonEmpty}
		if s.Only != "" {
			if cs.only, err = regexp.Compile(s.Only); err != nil {
				return alt{}, fmt.Errorf("compile %q: %w", s.Only, err)
			}
		}
		a.sets = append(a.sets, cs)
	}
	if r.Part != "" {
		t, err := compile(r.Part)
		if err != nil {
			return alt{}, err
		}
		a.part = t
	}
	return a, nil
}

// compileTemplate reads text with $0, $name and ${name} (and $$ for a
// dollar). A name re lacks is an error unless optional; it reads "".
func compileTemplate(src string, re *regexp.Regexp, optional []string) (template, bool, error) {
	t := template{}
	groups := false
	text := func(s string) {
		if s == "" {
			return
		}
		if n := len(t); n > 0 && t[n-1].group == pieceText {
			t[n-1].text += s
		} else {
			t = append(t, piece{text: s, group: pieceText})
		}
	}
	for src != "" {
		i := strings.IndexByte(src, '$')
		if i < 0 {
			text(src)
			break
		}
		text(src[:i])
		src = src[i+1:]
		var name string
		switch {
		case strings.HasPrefix(src, "$"):
			text("$")
			src = src[1:]
			continue
		case strings.HasPrefix(src, "{"):
			j := strings.IndexByte(src, '}')
			if j < 0 {
				return nil, false, errors.New("template with an unclosed ${")
			}
			name, src = src[1:j], src[j+1:]
		default:
			j := 0
			for j < len(src) && (src[j] == '_' || 'a' <= src[j] && src[j] <= 'z' || 'A' <= src[j] && src[j] <= 'Z' || '0' <= src[j] && src[j] <= '9') {
				j++
			}
			name, src = src[:j], src[j:]
		}
		g := -1
		if re != nil {
			g = re.SubexpIndex(name)
		}
		switch {
		case name == "0":
			t = append(t, piece{group: 0})
		case name == "":
			return nil, false, errors.New("template with a $ and no name")
		case g > 0:
			t = append(t, piece{group: g})
			groups = true
		case slices.Contains(optional, name):
			t = append(t, piece{group: pieceAbsent})
		default:
			return nil, false, fmt.Errorf("has no (?P<%s>…) group", name)
		}
	}
	if len(t) == 0 {
		t = template{{group: pieceText}}
	}
	return t, groups, nil
}

// literalEnds returns the literal text every match of the anchored
// expression src starts and ends with ("" where it has none).
func literalEnds(src string) (prefix, suffix string) {
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return "", ""
	}
	re = re.Simplify()
	if re.Op != syntax.OpConcat || len(re.Sub) < 2 {
		return "", ""
	}
	lit := func(s *syntax.Regexp) string {
		if s.Op == syntax.OpLiteral && s.Flags&syntax.FoldCase == 0 {
			return string(s.Rune)
		}
		return ""
	}
	sub := re.Sub
	if sub[0].Op == syntax.OpBeginText {
		prefix = lit(sub[1])
	}
	if sub[len(sub)-1].Op == syntax.OpEndText {
		suffix = lit(sub[len(sub)-2])
	}
	return prefix, suffix
}
