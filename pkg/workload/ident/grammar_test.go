package ident

import (
	"reflect"
	"testing"
)

// Every string field of Identity but Kind (which Start sets) is a Field,
// each once: a field added for a new layout can be set by its rules.
func TestRefCoversEveryStringField(t *testing.T) {
	var id Identity
	byAddr := map[*string]Field{}
	for f := Field(0); f < fieldCount; f++ {
		p := id.Ref(f)
		if p == nil {
			t.Fatalf("Field %d has no Ref", f)
		}
		if g, dup := byAddr[p]; dup {
			t.Errorf("Fields %d and %d are the same field", g, f)
		}
		byAddr[p] = f
	}
	if id.Ref(fieldCount) != nil || id.Ref(-1) != nil {
		t.Error("Ref of an unknown Field is not nil")
	}
	v := reflect.ValueOf(&id).Elem()
	for i := range v.NumField() {
		p, ok := v.Field(i).Addr().Interface().(*string)
		if !ok {
			continue // Kind, and the numbers
		}
		if _, ok := byAddr[p]; !ok {
			t.Errorf("Identity.%s has no Field constant (and no case in Ref)", v.Type().Field(i).Name)
		}
	}
}

// Every level has a grammar, and the table's grammars are what Grammars
// returns, in its order.
func TestGrammars(t *testing.T) {
	gs := Grammars()
	if len(gs) != len(kinds) {
		t.Fatalf("%d grammars for %d rows", len(gs), len(kinds))
	}
	for i, g := range gs {
		if g.Kind != kinds[i].kind || len(g.Grammar.Rules) == 0 {
			t.Errorf("grammar %d: %s with %d rules, row %s", i, g.Kind, len(g.Grammar.Rules), kinds[i].kind)
		}
	}
}
