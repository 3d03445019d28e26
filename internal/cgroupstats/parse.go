package cgroupstats

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/wattrace/wattrace/internal/decimal"
	"github.com/wattrace/wattrace/pkg/reading"
)

// The parsers work on the Reader's buffer in place and allocate only to
// report an error, so a Read costs syscalls, not garbage. Every error names
// the offending line; the Reader adds the file's path.

var (
	errNumber  = errors.New("invalid number")
	errDevice  = errors.New("invalid device number, want major:minor")
	errNoTotal = errors.New("no total= field")
	errNoSome  = errors.New("no \"some\" line")
)

// lineError reports a bad line, 1-based as an editor counts.
func lineError(n int, line []byte, err error) error {
	return fmt.Errorf("line %d %q: %w", n, line, err)
}

// nextLine splits data at the first newline.
func nextLine(data []byte) (line, rest []byte) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return data[:i], data[i+1:]
	}
	return data, nil
}

// nextField returns the first space- or tab-separated field of b and what
// follows it.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	j := i
	for j < len(b) && b[j] != ' ' && b[j] != '\t' {
		j++
	}
	return b[i:j], b[j:]
}

// parseUint parses a decimal uint64 without allocating.
func parseUint(b []byte) (uint64, bool) { return decimal.Parse(b) }

// parseSingle parses a file holding one number, like memory.failcnt.
func parseSingle(data []byte) (uint64, error) {
	line := bytes.TrimSpace(data)
	if v, ok := parseUint(line); ok {
		return v, nil
	}
	return 0, lineError(1, line, errNumber)
}

// v1Unlimited is the smallest v1 limit that means "no limit". The kernel
// shows an unset limit as PAGE_COUNTER_MAX pages in bytes: LONG_MAX rounded
// down to a page, so 9223372036854771712 with 4 KiB pages and less with
// 64 KiB ones; kernels before 3.19 showed LONG_MAX itself. Anything within
// 1 MiB of LONG_MAX covers every page size.
const v1Unlimited = math.MaxInt64 - 1<<20

// parseV1Limit parses memory.limit_in_bytes.
func parseV1Limit(data []byte) (uint64, error) {
	v, err := parseSingle(data)
	if err == nil && v >= v1Unlimited {
		v = reading.Unlimited
	}
	return v, err
}

// parseV2Max parses a v2 limit file such as memory.max: a number or "max".
func parseV2Max(data []byte) (uint64, error) {
	if string(bytes.TrimSpace(data)) == "max" {
		return reading.Unlimited, nil
	}
	return parseSingle(data)
}

// parseKV reads a flat-keyed file of "key value" lines (memory.stat,
// cpu.stat, cpuacct.stat, memory.events, memory.oom_control). It stores the
// value of keys[i] in vals[i] and sets bit i of the result for each key
// found; a key appearing twice keeps its last value. A wanted key whose
// value is not a number is an error; other lines are ignored, malformed or
// not, so a kernel adding a key we do not read cannot break the file.
// keys has at most 64 entries.
func parseKV(data []byte, keys []string, vals []uint64) (uint64, error) {
	var found uint64
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data = nextLine(data)
		key, rest := nextField(line)
		i := keyIndex(keys, key)
		if i < 0 {
			continue
		}
		val, tail := nextField(rest)
		v, ok := parseUint(val)
		if !ok || len(bytes.TrimSpace(tail)) != 0 {
			return found, lineError(n, line, errNumber)
		}
		vals[i] = v
		found |= 1 << i
	}
	return found, nil
}

// keyIndex is slices.Index for a []byte key; comparing with string(key)
// compiles to a byte comparison, where converting first would allocate.
func keyIndex(keys []string, key []byte) int {
	for i, k := range keys {
		if k == string(key) {
			return i
		}
	}
	return -1
}

// parseDevice parses "major:minor".
func parseDevice(b []byte) (maj, min uint32, ok bool) {
	a, c, ok := bytes.Cut(b, []byte{':'})
	if !ok {
		return 0, 0, false
	}
	x, ok1 := parseUint(a)
	y, ok2 := parseUint(c)
	if !ok1 || !ok2 || x > math.MaxUint32 || y > math.MaxUint32 {
		return 0, 0, false
	}
	return uint32(x), uint32(y), true
}

// device returns the entry of io for maj:min, appending a zero one first if
// there is none. Hosts have few block devices, so a linear search beats a
// map and allocates nothing.
func device(io *[]reading.DeviceIO, maj, min uint32) *reading.DeviceIO {
	for i := range *io {
		if d := &(*io)[i]; d.Major == maj && d.Minor == min {
			return d
		}
	}
	*io = append(*io, reading.DeviceIO{Major: maj, Minor: min})
	return &(*io)[len(*io)-1]
}

// parseBlkio adds a v1 blkio file to io: lines "8:0 Read 1234", one per
// device and operation (Read, Write, Sync, Async, Discard, Total), then
// "Total 1234" for all devices. ops says whether the file counts requests
// (io_serviced) or bytes (io_service_bytes). Sync, Async and Total are
// other views of the same IO and are skipped, as is the summary line; an
// empty file is no IO.
func parseBlkio(data []byte, ops bool, io *[]reading.DeviceIO) error {
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data = nextLine(data)
		dev, rest := nextField(line)
		if len(dev) == 0 {
			continue
		}
		op, rest := nextField(rest)
		val, tail := nextField(rest)
		if len(val) == 0 && string(dev) == "Total" {
			continue // "Total 1234": op holds the number
		}
		maj, min, ok := parseDevice(dev)
		if !ok {
			return lineError(n, line, errDevice)
		}
		v, ok := parseUint(val)
		if !ok || len(bytes.TrimSpace(tail)) != 0 {
			return lineError(n, line, errNumber)
		}
		var dst *uint64
		d := device(io, maj, min)
		switch string(op) {
		case "Read":
			dst = pick(ops, &d.ReadOps, &d.ReadBytes)
		case "Write":
			dst = pick(ops, &d.WriteOps, &d.WriteBytes)
		case "Discard":
			dst = pick(ops, &d.DiscardOps, &d.DiscardBytes)
		default:
			continue
		}
		*dst = v
	}
	return nil
}

func pick(first bool, a, b *uint64) *uint64 {
	if first {
		return a
	}
	return b
}

// parseIOStat adds a v2 io.stat to io: one line per device, "8:0 rbytes=1
// wbytes=2 rios=3 wios=4 dbytes=5 dios=6", possibly followed by keys of
// io.cost or io.latency, which are skipped.
func parseIOStat(data []byte, io *[]reading.DeviceIO) error {
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data = nextLine(data)
		dev, rest := nextField(line)
		if len(dev) == 0 {
			continue
		}
		maj, min, ok := parseDevice(dev)
		if !ok {
			return lineError(n, line, errDevice)
		}
		d := device(io, maj, min)
		for {
			var kv []byte
			kv, rest = nextField(rest)
			if len(kv) == 0 {
				break
			}
			k, v, _ := bytes.Cut(kv, []byte{'='})
			var dst *uint64
			switch string(k) {
			case "rbytes":
				dst = &d.ReadBytes
			case "wbytes":
				dst = &d.WriteBytes
			case "rios":
				dst = &d.ReadOps
			case "wios":
				dst = &d.WriteOps
			case "dbytes":
				dst = &d.DiscardBytes
			case "dios":
				dst = &d.DiscardOps
			default:
				continue
			}
			x, ok := parseUint(v)
			if !ok {
				return lineError(n, line, errNumber)
			}
			*dst = x
		}
	}
	return nil
}

// sortIO orders devices by number, so output does not depend on the order
// the kernel listed them in or on which v1 file named a device first.
func sortIO(io []reading.DeviceIO) {
	slices.SortFunc(io, func(a, b reading.DeviceIO) int {
		if a.Major != b.Major {
			return int(a.Major) - int(b.Major)
		}
		return int(a.Minor) - int(b.Minor)
	})
}

// parsePressure reads a PSI file: "some avg10=0.00 avg60=0.00 avg300=0.00
// total=12345" and, on kernels and resources that have it, the same with
// "full". It returns the totals in µs. Lines other than some and full are
// ignored, for kernels that may add some.
func parsePressure(data []byte) (some, full uint64, hasFull bool, err error) {
	hasSome := false
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data = nextLine(data)
		kind, rest := nextField(line)
		var dst *uint64
		switch string(kind) {
		case "some":
			dst, hasSome = &some, true
		case "full":
			dst, hasFull = &full, true
		default:
			continue
		}
		total, found := []byte(nil), false
		for {
			var kv []byte
			kv, rest = nextField(rest)
			if len(kv) == 0 {
				break
			}
			if v, ok := bytes.CutPrefix(kv, []byte("total=")); ok {
				total, found = v, true
			}
		}
		if !found {
			return 0, 0, false, lineError(n, line, errNoTotal)
		}
		v, ok := parseUint(total)
		if !ok {
			return 0, 0, false, lineError(n, line, errNumber)
		}
		*dst = v
	}
	if !hasSome {
		return 0, 0, false, errNoSome
	}
	return some, full, hasFull, nil
}

// countLines counts the non-empty lines of a file listing ids, one a line
// (tasks, cgroup.threads).
func countLines(data []byte) uint64 {
	var n uint64
	for len(data) > 0 {
		var line []byte
		line, data = nextLine(data)
		if len(bytes.TrimSpace(line)) > 0 {
			n++
		}
	}
	return n
}

// parseDevName returns DEVNAME from a sysfs uevent file.
func parseDevName(data []byte) ([]byte, bool) {
	for len(data) > 0 {
		var line []byte
		line, data = nextLine(data)
		if v, ok := bytes.CutPrefix(line, []byte("DEVNAME=")); ok && len(v) > 0 {
			return v, true
		}
	}
	return nil, false
}
