package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
	"testing"
)

// issueRef matches a comment that points to a tracker entry: "issue" or
// "issues", any case, then a number, with or without a "#". A reader of
// the code has no such tracker, so the comment must say the reason itself.
var issueRef = regexp.MustCompile(`(?i)\bissues?\s+#?\d+`)

// No Go comment in the checkout cites "issue N"; it says the reason in
// place, or nothing.
func TestNoCommentCitesAnIssue(t *testing.T) {
	srcs := goSources(t, func(string) bool { return true })
	if len(srcs) < 200 {
		t.Fatalf("found %d Go files: the walk of the checkout is broken", len(srcs))
	}
	for _, s := range srcs {
		for _, at := range issueRefs(s.fset, s.file.Comments) {
			t.Errorf("%s: a comment cites %q: say the reason in place, or drop the reference", at.pos, at.text)
		}
	}
}

type issueCite struct {
	pos  token.Position
	text string
}

// issueRefs finds the issue citations in comments, line by line (a
// citation broken across two comment lines, "issue\n// 10", is missed;
// none has been written so).
func issueRefs(fset *token.FileSet, groups []*ast.CommentGroup) []issueCite {
	var out []issueCite
	for _, g := range groups {
		for _, c := range g.List {
			for i, line := range strings.Split(c.Text, "\n") {
				if m := issueRef.FindString(line); m != "" {
					p := fset.Position(c.Pos())
					p.Line += i
					out = append(out, issueCite{p, m})
				}
			}
		}
	}
	return out
}

// The checker itself: citations in line and block comments are found,
// code and strings that mention issues are not.
func TestIssueRefsFound(t *testing.T) {
	const src = `package p

// Fine: the reason is here. The issues list is elsewhere.
var a = "issue 10" // a string is not a comment

// Since Issue 19 this runs twice.
func f() {
	/* see issue #4
	   and issues 9 and 20 */
	_ = a // tissue 5 is not an issue
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range issueRefs(fset, f.Comments) {
		got = append(got, c.text+"@"+strings.TrimPrefix(c.pos.String(), "p.go:"))
	}
	want := "Issue 19@6:1 issue #4@8:2 issues 9@9:2"
	if strings.Join(got, " ") != want {
		t.Errorf("citations %q, want %q", strings.Join(got, " "), want)
	}
}
