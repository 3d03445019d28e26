// Package decimal parses the plain non-negative decimal numbers the kernel
// writes in sysfs, procfs and cgroupfs: digits only, no sign, no spaces,
// no overflow. strconv would also take "+3" or "0x10" where the kernel
// never writes them, and wants a string where readers hold bytes.
package decimal

import "math"

// Parse parses b without allocating; ok is false for anything but digits
// that fit in a uint64.
func Parse[T ~string | ~[]byte](b T) (v uint64, ok bool) {
	if len(b) == 0 {
		return 0, false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
