package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

// exeRss is the resident KiB of this process's mappings of its executable.
func exeRss(t *testing.T) int {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kb, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 5 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":") {
			in = len(fs) >= 6 && strings.Join(fs[5:], " ") == exe
			continue
		}
		if in && len(fs) >= 2 && fs[0] == "Rss:" {
			v, _ := strconv.Atoi(fs[1])
			kb += v
		}
	}
	return kb
}

// The test binary's own text and read-only data leave RSS once released,
// and what the test then runs comes back on use.
func TestReleaseBinaryPages(t *testing.T) {
	before := exeRss(t)
	n, err := releaseBinaryPages()
	if err != nil {
		testenv.Need(t, "the kernel refused MADV_PAGEOUT here: %v", err)
	}
	after := exeRss(t)
	t.Logf("executable resident: %d KiB before, %d KiB after releasing %d KiB", before, after, n/1024)
	if n < before*1024/2 {
		t.Errorf("asked to release %d bytes of a binary with %d KiB resident", n, before)
	}
	if after > before/2 {
		t.Errorf("executable resident %d KiB after release, %d KiB before: not reclaimed", after, before)
	}
}
