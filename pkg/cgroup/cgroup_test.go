package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestDetectFixtures(t *testing.T) {
	tests := []struct {
		name, procfs, root, override string
		want                         Hierarchy
		wantErr                      string
	}{
		{name: "pure v2", procfs: "v2", want: Hierarchy{V2, "/sys/fs/cgroup"}},
		{name: "pure v2 rebased", procfs: "v2", root: "/host/sys/fs/cgroup", want: Hierarchy{V2, "/host/sys/fs/cgroup"}},
		{name: "pure v2 forced cpuacct", procfs: "v2", override: "cpuacct", wantErr: `"cpuacct" forced but not mounted`},
		{name: "hybrid", procfs: "hybrid", want: Hierarchy{CPUAcct, "/sys/fs/cgroup/cpuacct"}},
		{name: "hybrid auto", procfs: "hybrid", override: "auto", want: Hierarchy{CPUAcct, "/sys/fs/cgroup/cpuacct"}},
		{name: "hybrid rebased", procfs: "hybrid", root: "/host/sys/fs/cgroup/", want: Hierarchy{CPUAcct, "/host/sys/fs/cgroup/cpuacct"}},
		{name: "hybrid forced cpu", procfs: "hybrid", override: "cpu", want: Hierarchy{CPU, "/sys/fs/cgroup/cpu"}},
		{name: "hybrid forced v2", procfs: "hybrid", override: "v2", want: Hierarchy{V2, "/sys/fs/cgroup/unified"}},
		{name: "v1 without cpuacct", procfs: "v1-nocpuacct", want: Hierarchy{CPU, "/sys/fs/cgroup/cpu"}},
		{name: "v1 without cpuacct forced", procfs: "v1-nocpuacct", override: "cpuacct", wantErr: "not mounted"},
		{name: "v1 without cpuacct forced v2", procfs: "v1-nocpuacct", override: "v2", wantErr: "not mounted"},
		{name: "comounted", procfs: "comounted", want: Hierarchy{CPUAcct, "/sys/fs/cgroup/cpu,cpuacct"}},
		{name: "comounted forced cpu", procfs: "comounted", override: "cpu", want: Hierarchy{CPU, "/sys/fs/cgroup/cpu,cpuacct"}},
		{name: "comounted rebased", procfs: "comounted", root: "/host/cg", want: Hierarchy{CPUAcct, "/host/cg/cpu,cpuacct"}},
		{name: "nothing usable", procfs: "none", wantErr: "no cgroup2, cpuacct or cpu hierarchy"},
		{name: "fallback to 1/mounts", procfs: "fallback", want: Hierarchy{CPUAcct, "/sys/fs/cgroup/cpuacct"}},
		{name: "container prefers mount under root", procfs: "container", root: "/host/sys/fs/cgroup", want: Hierarchy{CPUAcct, "/host/sys/fs/cgroup/cpuacct"}},
		{name: "container escaped v2", procfs: "container", root: "/host/sys/fs/cgroup", override: "v2", want: Hierarchy{V2, "/host/sys/fs/cgroup/my unified"}},
		{name: "container default root", procfs: "container", want: Hierarchy{CPUAcct, "/sys/fs/cgroup/cpuacct"}},
		{name: "unknown override", procfs: "hybrid", override: "cpuacct2", wantErr: "want one of auto, v2, cpuacct, cpu"},
		{name: "no mounts file", procfs: "missing", wantErr: "read mounts"},
		{name: "hybrid comounted", procfs: "hybrid-comounted", want: Hierarchy{CPUAcct, "/sys/fs/cgroup/cpu,cpuacct"}},
		{name: "hybrid comounted forced v2", procfs: "hybrid-comounted", override: "v2", want: Hierarchy{V2, "/sys/fs/cgroup/unified"}},
		{name: "container host mounts", procfs: "container-host", root: "/host/sys/fs/cgroup", want: Hierarchy{CPUAcct, "/host/sys/fs/cgroup/cpuacct"}},
		{name: "container host mounts forced v2", procfs: "container-host", root: "/host/sys/fs/cgroup", override: "v2", want: Hierarchy{V2, "/host/sys/fs/cgroup/unified"}},
		{name: "no cgroups", procfs: "no-cgroups", wantErr: "no cgroup2, cpuacct or cpu hierarchy mounted according to testdata/mounts/no-cgroups/self/mounts"},
	}
	// One set of mounts fixtures serves this test and internal/cgroupstats's
	// layout test: each must have a case in both.
	covered := map[string]bool{"missing": true}
	for _, tt := range tests {
		covered[tt.procfs] = true
	}
	dirs, err := os.ReadDir(filepath.Join("testdata", "mounts"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && !covered[d.Name()] {
			t.Errorf("fixture testdata/mounts/%s has no case", d.Name())
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Detect(filepath.Join("testdata", "mounts", tt.procfs), tt.root, tt.override)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Detect = %+v, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Detect: %v", err)
			}
			if got != tt.want {
				t.Errorf("Detect = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDetectHost runs Detect against this machine. On the development host
// (hybrid, cpuacct mounted on its own) it must pick cpuacct; elsewhere it
// must at least pick a hierarchy whose usage file exists.
func TestDetectHost(t *testing.T) {
	h, err := Detect("/proc", "", "auto")
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	t.Logf("host hierarchy: %+v", h)
	if _, err := os.Stat("/sys/fs/cgroup/cpuacct/cpuacct.usage"); err == nil {
		want := Hierarchy{CPUAcct, "/sys/fs/cgroup/cpuacct"}
		if h != want {
			t.Fatalf("Detect = %+v, want %+v", h, want)
		}
	}
	if _, err := NewResolver(h).ID("/"); err != nil {
		t.Fatalf("root of %+v: %v", h, err)
	}
}

func TestProcCgroupPath(t *testing.T) {
	hybrid := "12:pids:/x\n4:memory:/process_api/e9\n3:cpu,cpuacct:/slurm/uid_1/job_2\n1:name=systemd:/sys\n0::/unified/path\n"
	separate := "2:cpuacct:/a\n1:cpu:/b\n0::/\n"
	tests := []struct {
		data string
		k    Kind
		want string
		ok   bool
	}{
		{hybrid, CPUAcct, "/slurm/uid_1/job_2", true},
		{hybrid, CPU, "/slurm/uid_1/job_2", true},
		{hybrid, V2, "/unified/path", true},
		{separate, CPUAcct, "/a", true},
		{separate, CPU, "/b", true},
		{separate, V2, "/", true},
		{"0::/a:b/c\n", V2, "/a:b/c", true}, // colons in names survive
		{"1:name=systemd:/\n", V2, "", false},
		{"3:cpuacct:relative\n", CPUAcct, "", false},
		{"0::/../../outside\n", V2, "", false},
		{"garbage\n\n3:cpuacct:/ok", CPUAcct, "/ok", true},
		{"", V2, "", false},
	}
	for _, tt := range tests {
		got, ok := ProcCgroupPath([]byte(tt.data), tt.k)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ProcCgroupPath(%q, %s) = %q, %v; want %q, %v", tt.data, tt.k, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzProcCgroupPath(f *testing.F) {
	f.Add([]byte("3:cpu,cpuacct:/slurm/job\n0::/\n"), uint8(0))
	f.Add([]byte("0::/a:b\n1:name=systemd:/"), uint8(2))
	f.Add([]byte("::\n:\n0::/..\n"), uint8(1))
	kinds := []Kind{V2, CPUAcct, CPU}
	f.Fuzz(func(t *testing.T, data []byte, k uint8) {
		p, ok := ProcCgroupPath(data, kinds[int(k)%len(kinds)])
		if !ok {
			if p != "" {
				t.Fatalf("not ok but path %q", p)
			}
			return
		}
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "\n") || !strings.Contains(string(data), p) {
			t.Fatalf("bad path %q from %q", p, data)
		}
		for _, seg := range strings.Split(p, "/") {
			if seg == ".." {
				t.Fatalf("path %q escapes the hierarchy", p)
			}
		}
	})
}

func TestParseCPUStatUsage(t *testing.T) {
	got, err := parseCPUStatUsage([]byte("usage_usec 145599551\nuser_usec 103534632\nsystem_usec 42064919\n"))
	if err != nil || got != 145599551 {
		t.Fatalf("= %d, %v", got, err)
	}
	for _, bad := range []string{"", "user_usec 1\n", "usage_usec x\n", "usage_usec -1\n"} {
		if v, err := parseCPUStatUsage([]byte(bad)); err == nil {
			t.Errorf("parseCPUStatUsage(%q) = %d, want error", bad, v)
		}
	}
}

// FuzzParseCPUStatUsage: what the parser returns is the number on the
// first usage_usec line, read by strconv from that line alone, and any
// value it returns comes back unchanged from a cpu.stat the kernel would
// write around it (round trip).
func FuzzParseCPUStatUsage(f *testing.F) {
	f.Add([]byte("usage_usec 145599551\nuser_usec 1\n"))
	f.Add([]byte("nr_periods 0\nusage_usec 18446744073709551615\n"))
	f.Add([]byte("usage_usec \n"))
	f.Add([]byte("user_usec 7\nusage_usec  42 \nusage_usec 9\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseCPUStatUsage(data)
		if err != nil {
			return
		}
		var line string
		for l := range strings.SplitSeq(string(data), "\n") {
			if strings.HasPrefix(l, "usage_usec ") {
				line = l
				break
			}
		}
		if line == "" {
			t.Fatalf("parsed %d from %q without a usage_usec line", v, data)
		}
		want, werr := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "usage_usec ")), 10, 64)
		if werr != nil || v != want {
			t.Fatalf("parseCPUStatUsage(%q) = %d; its first usage_usec line %q holds %d (%v)", data, v, line, want, werr)
		}
		stat := fmt.Sprintf("usage_usec %d\nuser_usec 1\nsystem_usec 2\nnr_periods 0\n", v)
		if again, err := parseCPUStatUsage([]byte(stat)); err != nil || again != v {
			t.Fatalf("round trip of %d: %d, %v", v, again, err)
		}
	})
}

func TestMountsParsing(t *testing.T) {
	ms := ParseMounts([]byte("cgroup /a\\040b\\134c cgroup rw,cpu\nshort line\ncgroup2 /u cgroup2 rw\n"), "/").All()
	if len(ms) != 2 || ms[0].Point != `/a b\c` || !slices.Contains(ms[0].Options, "cpu") || ms[1].FSType != "cgroup2" || !ms[0].InRoot {
		t.Fatalf("ParseMounts = %+v", ms)
	}
	if got := unescapeMount(`/x\04`); got != `/x\04` {
		t.Errorf("truncated escape: %q", got)
	}
}

// Without either mounts file the error names both.
func TestReadMountsNoFile(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadMounts(dir, "")
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "self", "mounts")) || !strings.Contains(err.Error(), filepath.Join(dir, "1", "mounts")) {
		t.Errorf("no mounts file: err = %v, want both paths named", err)
	}
}
