package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseBinaryPages asks the kernel to reclaim the pages of the
// exporter's own executable that are mapped read-only now (MADV_PAGEOUT),
// and returns how many bytes it asked for. Why: this kernel (6.18) maps a
// large page-cache folio whole at the first fault in it, so once start-up
// has run, nearly all of the binary's text and read-only data (about 21
// MiB) is resident, while the running exporter (steps, rendering, HTTP)
// touches about a third of it; start-up's code (BTF decoding, BPF loading,
// configuration) is never run again. What the exporter does touch comes back
// at its next fault. The pages are clean page cache: nothing is written,
// and pages that another process maps too are left alone by the kernel.
// Where the kernel refuses (a binary we may not write, an old kernel
// without MADV_PAGEOUT) RSS stays as it was; that is the error.
func releaseBinaryPages() (int, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("find own executable: %w", err)
	}
	// A binary written moments ago (go build, go test) may still have
	// dirty pages, which reclaim leaves to the flusher; an installed
	// binary's are clean, and this costs nothing then.
	if x, err := os.Open(exe); err == nil {
		_ = x.Sync()
		x.Close()
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("read own mappings: %w", err)
	}
	defer f.Close()
	type span struct{ start, end uintptr }
	var spans []span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-00a1c000 r-xp 00000000 fe:01 1234  /path/to/exe
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || strings.Join(fs[5:], " ") != exe || strings.Contains(fs[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return 0, fmt.Errorf("own mapping %q: not an address range", fs[0])
		}
		spans = append(spans, span{uintptr(start), uintptr(end)})
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read own mappings: %w", err)
	}
	// Collected first: the kernel must not be asked while the maps file,
	// which it would then change under the reader, is open mid-read.
	n := 0
	for _, s := range spans {
		// A raw madvise: unix.Madvise wants a []byte over the range,
		// which would need an unsafe conversion of the address.
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, s.start, s.end-s.start, unix.MADV_PAGEOUT); e != 0 {
			return n, fmt.Errorf("madvise(MADV_PAGEOUT) on own executable: %w", e)
		}
		n += int(s.end - s.start)
	}
	return n, nil
}
