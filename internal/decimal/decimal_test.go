package decimal

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "42": 42, "18446744073709551615": 1<<64 - 1} {
		if v, ok := Parse(in); !ok || v != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, v, ok, want)
		}
		if v, ok := Parse([]byte(in)); !ok || v != want {
			t.Errorf("Parse([]byte(%q)) = %d, %v; want %d", in, v, ok, want)
		}
	}
	for _, in := range []string{"", "+3", "-1", " 1", "1 ", "0x10", "1.5", "18446744073709551616"} {
		if v, ok := Parse(in); ok {
			t.Errorf("Parse(%q) = %d, accepted", in, v)
		}
	}
}
