package workload

import (
	"strings"
	"testing"

	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// A grammar the parser cannot walk as written is refused when the parser
// is built, naming the level and the rule.
func TestCompileGrammarsRefuses(t *testing.T) {
	ok := ident.Rule{Is: []string{"x"}, Then: "x"}
	for _, tc := range []struct {
		name string
		rule ident.Rule
		want string
	}{
		{"context no rule leaves", ident.Rule{After: []string{"nowhere"}, Is: []string{"a"}}, `toy grammar, rule 1: context "nowhere", which no rule leaves`},
		{"flag no rule raises", ident.Rule{Unless: []string{"nobody"}, Is: []string{"a"}}, `flag "nobody", which no rule raises`},
		{"raising the parser's flag", ident.Rule{Is: []string{"a"}, Raise: []string{ident.FlagWorkload}}, "workload is the parser's"},
		{"no match", ident.Rule{Start: "toy"}, "neither Is nor Pattern"},
		{"two matches", ident.Rule{Is: []string{"a"}, Pattern: []string{"^a$"}}, "both Is and Pattern"},
		{"start and plain", ident.Rule{Is: []string{"a"}, Start: "toy", Plain: "m"}, "both Start and Plain"},
		{"bad pattern", ident.Rule{Pattern: []string{"^a($"}}, `compile "^a($"`},
		{"missing group", ident.Rule{Pattern: []string{"^a$"}, Set: []ident.Set{{Field: ident.FieldID, Value: "$id"}}}, `"^a$" has no (?P<id>…) group`},
		{"group of a literal", ident.Rule{Is: []string{"a"}, Part: "$id"}, "has no (?P<id>…) group"},
		{"unknown field", ident.Rule{Is: []string{"a"}, Set: []ident.Set{{Field: 99, Value: "$0"}}}, "unknown field 99"},
		{"bad Only", ident.Rule{Is: []string{"a"}, Set: []ident.Set{{Field: ident.FieldID, Value: "$0", Only: "("}}}, `compile "("`},
		{"unclosed name", ident.Rule{Is: []string{"a"}, Part: "${0"}, "unclosed"},
		{"slot with two patterns", ident.Rule{Slot: ident.SlotSlurmJob, Pattern: []string{"^j$"}}, "slot slurm.job with other patterns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := append(ident.Grammars(), ident.KindGrammar{Kind: "toy", Grammar: ident.Grammar{Rules: []ident.Rule{ok, tc.rule}}})
			_, err := compileGrammars(gs, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestCompileTemplate(t *testing.T) {
	gs := []ident.KindGrammar{{Kind: "toy", Grammar: ident.Grammar{Rules: []ident.Rule{
		{Pattern: []string{`^t-(?P<a>[a-z]+)(?:-(?P<b>[0-9]+))?\.toy$`}, Optional: []string{"c"}, Start: "toy", Manager: "m",
			Set: []ident.Set{{Field: ident.FieldID, Value: "$a/${b}x$$$c"}, {Field: ident.FieldName, Value: "[$0]"},
				{Field: ident.FieldUID, Value: "$b", NonEmpty: true}, {Field: ident.FieldJobID, Value: "$a", Only: "^q"}}},
		{Is: []string{"u"}, Set: []ident.Set{{Field: ident.FieldUID, Value: "u"}}},
	}}}}
	p, err := compileGrammars(gs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want ident.Identity
	}{
		{"/u/t-abc-12.toy", ident.Identity{Kind: "toy", Manager: "m", ID: "abc/12x$", Name: "[t-abc-12.toy]", UID: "12"}},
		{"/u/t-qz.toy", ident.Identity{Kind: "toy", Manager: "m", ID: "qz/x$", Name: "[t-qz.toy]", UID: "u", JobID: "qz"}},
		{"/t-abc.toy/u", ident.Identity{Kind: "toy", Manager: "m", ID: "abc/x$", Name: "[t-abc.toy]", UID: "u"}},
		{"/t-abc.toyz", ident.Identity{Kind: ident.KindCgroup}},
	} {
		if got := p.Parse(tc.path); got != tc.want {
			t.Errorf("Parse(%q)\n got %+v\nwant %+v", tc.path, got, tc.want)
		}
	}
}

func TestLiteralEnds(t *testing.T) {
	for src, want := range map[string][2]string{
		`^docker-(?P<id>[0-9a-f]{64})(?:\.scope)?$`: {"docker-", ""},
		`^machine-qemu\\x2d(?P<name>.+)\.scope$`:    {`machine-qemu\x2d`, ".scope"},
		`^slurm(?:_(?P<node>[^/]+))?$`:              {"slurm", ""},
		`^(?:[^/]*-)?kubepods\.slice$`:              {"", "kubepods.slice"},
		`^(?i)abc$`:                                 {"", ""},
		`^a|b$`:                                     {"", ""},
		`abc`:                                       {"", ""},
		`^abc$`:                                     {"abc", "abc"},
	} {
		if p, s := literalEnds(src); p != want[0] || s != want[1] {
			t.Errorf("literalEnds(%q) = %q, %q; want %q, %q", src, p, s, want[0], want[1])
		}
	}
}
