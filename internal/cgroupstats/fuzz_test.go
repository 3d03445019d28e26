package cgroupstats

import (
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"

	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The parsers read kernel files, but a fixture, a future kernel or a
// container runtime's fake cgroupfs can put anything there: they must
// return an error, never panic. Each fuzz target also checks a property
// of what it accepts.

// seed adds every fixture file named name as a corpus entry.
func seed(f *testing.F, names ...string) {
	for _, b := range fixtures(names...) {
		f.Add(b)
	}
}

// fixtures returns the contents of every fixture file with one of names.
func fixtures(names ...string) [][]byte {
	var out [][]byte
	_ = filepath.WalkDir("testdata", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && slices.Contains(names, d.Name()) {
			if b, err := os.ReadFile(p); err == nil {
				out = append(out, b)
			}
		}
		return nil
	})
	return out
}

// noDuplicates checks each device appears once: device() must merge.
func noDuplicates(t *testing.T, io []reading.DeviceIO) {
	seen := map[[2]uint32]bool{}
	for _, d := range io {
		k := [2]uint32{d.Major, d.Minor}
		if seen[k] {
			t.Fatalf("device %d:%d listed twice in %+v", d.Major, d.Minor, io)
		}
		seen[k] = true
	}
}

func FuzzParseIOStat(f *testing.F) {
	seed(f, "io.stat")
	f.Add([]byte("8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=5 dios=6\n8:0 rbytes=9"))
	f.Add([]byte("8:0 =1 rbytes rbytes= ==\n:\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var io []reading.DeviceIO
		if err := parseIOStat(data, &io); err == nil {
			noDuplicates(t, io)
		}
	})
}

func FuzzParseBlkio(f *testing.F) {
	for _, b := range fixtures("blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_serviced_recursive", "blkio.throttle.io_service_bytes") {
		f.Add(b, false)
	}
	f.Add([]byte("8:0 Read 1\nTotal 1\n"), false)
	f.Add([]byte("Total\n8:0\n: Read 1\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, ops bool) {
		var io []reading.DeviceIO
		if err := parseBlkio(data, ops, &io); err == nil {
			noDuplicates(t, io)
		}
	})
}

func FuzzParsePressure(f *testing.F) {
	seed(f, "cpu.pressure", "memory.pressure", "io.pressure")
	f.Add([]byte("some total=1\nfull total=\n"))
	f.Add([]byte("some\tavg10=0.00 total=18446744073709551615"))
	f.Fuzz(func(t *testing.T, data []byte) {
		some, full, hasFull, err := parsePressure(data)
		if err != nil && (some != 0 || full != 0 || hasFull) {
			t.Fatalf("error %v with values %d %d %v", err, some, full, hasFull)
		}
	})
}

func FuzzParseKV(f *testing.F) {
	seed(f, "memory.stat", "cpu.stat", "cpuacct.stat", "memory.events", "memory.oom_control")
	f.Add([]byte("total_rss 1\ntotal_rss x\n"))
	keys := []string{"total_rss", "total_cache", "total_swap", "rss", "cache", "swap", "user_usec", "anon", "max", "oom_kill"}
	f.Fuzz(func(t *testing.T, data []byte) {
		vals := make([]uint64, len(keys))
		found, err := parseKV(data, keys, vals)
		if found>>len(keys) != 0 {
			t.Fatalf("found %b has bits beyond the %d keys", found, len(keys))
		}
		for i := range keys {
			if found&(1<<i) == 0 && vals[i] != 0 {
				t.Fatalf("key %s not found but set to %d (err %v)", keys[i], vals[i], err)
			}
		}
	})
}

func FuzzParseSingle(f *testing.F) {
	seed(f, "memory.max", "memory.limit_in_bytes", "memory.current", "pids.current")
	f.Add([]byte("max"))
	f.Add([]byte(" 18446744073709551616 \n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// parseSingle must agree with strconv on what is a number.
		v, err := parseSingle(data)
		s := string(bytes.TrimSpace(data))
		want, werr := strconv.ParseUint(s, 10, 64)
		if strings.HasPrefix(s, "+") || strings.Contains(s, "_") {
			werr = strconv.ErrSyntax // strconv takes these, the kernel never writes them
		}
		if (err == nil) != (werr == nil) || (err == nil && v != want) {
			t.Fatalf("parseSingle(%q) = %d, %v; strconv says %d, %v", data, v, err, want, werr)
		}
		_, _ = parseV1Limit(data)
		_, _ = parseV2Max(data)
	})
}

// FuzzParseMounts: no mounts data panics the parse, the hierarchy's choice
// or the layout's.
func FuzzParseMounts(f *testing.F) {
	for _, p := range []string{"hybrid-comounted/self/mounts", "v2/self/mounts", "container-host/1/mounts", "container/self/mounts"} {
		if b, err := os.ReadFile(filepath.Join(mountsFixtures, p)); err == nil {
			f.Add(b, "/host/sys/fs/cgroup")
		}
	}
	f.Add([]byte(`cgroup /a\\0 cgroup cpu 0 0`), "/")
	f.Fuzz(func(t *testing.T, data []byte, root string) {
		if root == "" {
			root = cgroup.HostRoot
		}
		// One detection: the key hierarchy and the layout name the same
		// mount for a v1 controller.
		ms := cgroup.ParseMounts(data, root)
		l, _ := LayoutOf(ms)
		if h, err := ms.Hierarchy(cgroup.Auto); err == nil && h.Kind != cgroup.V2 && l.V1Roots[string(h.Kind)] != h.Mount {
			t.Fatalf("hierarchy %+v, layout %+v", h, l)
		}
	})
}

// FuzzParseDevName: the byte-slice parsers of a uevent file and of
// cgroup.procs agree with a reference written with strings.Split, which
// is too slow for the loop (it allocates) but plainly right: DEVNAME is
// the first non-empty DEVNAME= line's value, and the task count is the
// number of lines that hold more than blanks.
func FuzzParseDevName(f *testing.F) {
	f.Add([]byte("MAJOR=8\nMINOR=0\nDEVNAME=sda\n"))
	f.Add([]byte("DEVNAME=\nDEVNAME=nvme0n1"))
	f.Add([]byte("1\n2\n\n \t\n3"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var wantName string
		wantOK := false
		var wantLines uint64
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "DEVNAME="); ok && v != "" && !wantOK {
				wantName, wantOK = v, true
			}
			if strings.TrimSpace(line) != "" {
				wantLines++
			}
		}
		if name, ok := parseDevName(data); ok != wantOK || string(name) != wantName {
			t.Errorf("parseDevName(%q) = %q %v, want %q %v", data, name, ok, wantName, wantOK)
		}
		if n := countLines(data); n != wantLines {
			t.Errorf("countLines(%q) = %d, want %d", data, n, wantLines)
		}
	})
}
