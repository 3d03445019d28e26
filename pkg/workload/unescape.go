package workload

import "strings"

// unescapeUnit decodes systemd's \xNN escapes in a unit name (systemd
// writes '-' inside a name component as \x2d, and every byte outside
// [A-Za-z0-9:_.] likewise). A backslash not followed by x and two hex
// digits is kept: the kernel does not stop anyone from naming a cgroup so.
func unescapeUnit(s string) string {
	if !strings.Contains(s, `\x`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			hi, ok1 := unhex(s[i+2])
			lo, ok2 := unhex(s[i+3])
			if ok1 && ok2 {
				b.WriteByte(hi<<4 | lo)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
