package cgroupstats

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
)

const (
	slurmStep = "/slurm_localhost/uid_0/job_5/step_0"
	slurmJob  = "/slurm_localhost/uid_0/job_5"
	v2Job     = "/system.slice/job.service"
	v2Limited = "/system.slice/limited.service"
)

// wantV1Step is every value of the fixture's Slurm step, read from v1.
func wantV1Step() reading.Resources {
	return reading.Resources{
		CPUUserSeconds:   12.345678901, // cpuacct.usage_user, not cpuacct.stat
		CPUSystemSeconds: 2.5,
		MemoryCurrent:    1073741824,
		MemoryLimit:      reading.Unlimited,
		MemoryRSS:        805306368, // total_rss, not rss
		MemoryCache:      201326592,
		MemorySwap:       4096,
		MemoryFailCount:  17,
		MemoryOOMKills:   2,
		IO: []reading.DeviceIO{
			{Device: "sda", Major: 8, Minor: 0, ReadBytes: 1048576, WriteBytes: 2097152, ReadOps: 256, WriteOps: 512, DiscardBytes: 8192, DiscardOps: 2},
			{Device: "253:0", Major: 253, Minor: 0, ReadBytes: 4096, ReadOps: 1},
		},
		Tasks: 3, // pids.current, not the 2 lines of tasks
		Available: reading.FieldCPU | reading.FieldMemoryCurrent | reading.FieldMemoryLimit | reading.FieldMemoryRSS | reading.FieldMemoryCache |
			reading.FieldMemorySwap | reading.FieldMemoryFailCount | reading.FieldMemoryOOMKills | reading.FieldIO | reading.FieldTasks | reading.FieldTasksRecursive,
	}
}

func wantV2Job() reading.Resources {
	return reading.Resources{
		CPUUserSeconds:   10,
		CPUSystemSeconds: 5,
		MemoryCurrent:    536870912,
		MemoryLimit:      reading.Unlimited,
		MemoryRSS:        268435456,
		MemoryCache:      134217728,
		MemorySwap:       8192,
		MemoryFailCount:  5,
		MemoryOOMKills:   1,
		IO: []reading.DeviceIO{
			{Device: "sda", Major: 8, Minor: 0, ReadBytes: 4096, ReadOps: 1, DiscardBytes: 65536, DiscardOps: 3},
			{Device: "nvme0n1", Major: 259, Minor: 0, ReadBytes: 1048576, WriteBytes: 4194304, ReadOps: 100, WriteOps: 200},
		},
		PSI: [reading.NumPSIResources]reading.Pressure{
			reading.PSICPU:    {SomeSeconds: 2.5, FullSeconds: 1},
			reading.PSIMemory: {SomeSeconds: 0.123456, FullSeconds: 0.1},
			reading.PSIIO:     {SomeSeconds: 7, FullSeconds: 6.5},
		},
		Tasks: 7,
		Available: reading.FieldCPU | reading.FieldMemoryCurrent | reading.FieldMemoryLimit | reading.FieldMemoryRSS | reading.FieldMemoryCache |
			reading.FieldMemorySwap | reading.FieldMemoryFailCount | reading.FieldMemoryOOMKills | reading.FieldIO | reading.FieldTasks | reading.FieldTasksRecursive |
			reading.FieldPSICPUSome | reading.FieldPSICPUFull | reading.FieldPSIMemorySome | reading.FieldPSIMemoryFull | reading.FieldPSIIOSome | reading.FieldPSIIOFull,
	}
}

func checkStats(t *testing.T, got, want reading.Resources) {
	t.Helper()
	if len(got.IO) == 0 && len(want.IO) == 0 {
		got.IO, want.IO = nil, nil // empty and nil mean the same here
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats:\n got  %+v\n want %+v", got, want)
	}
}

func read(t *testing.T, r *Reader, rel string) reading.Resources {
	t.Helper()
	s, err := r.Read(rel)
	if err != nil {
		t.Fatalf("Read(%s): %v", rel, err)
	}
	return s
}

func TestReadV1SlurmStep(t *testing.T) {
	root := copyFixture(t)
	r := NewReader(fixtureLayout(root, false, allV1...), filepath.Join(root, "sysfs"))
	checkStats(t, read(t, r, slurmStep), wantV1Step())
	// A trailing slash or a doubled one names the same cgroup.
	checkStats(t, read(t, r, slurmStep+"/"), wantV1Step())
	checkStats(t, read(t, r, "/slurm_localhost//uid_0/job_5/step_0"), wantV1Step())
}

// The job is the fixture's older kernel: cpuacct.stat ticks, no total_ or
// swap lines, no oom_kill, plain blkio files, an unknown device, no pids
// cgroup (so tasks comes from the job's own, empty, tasks file).
func TestReadV1OldKernelFallbacks(t *testing.T) {
	root := copyFixture(t)
	r := NewReader(fixtureLayout(root, false, allV1...), filepath.Join(root, "sysfs"))
	want := reading.Resources{
		CPUUserSeconds:   12.34,
		CPUSystemSeconds: 2.5,
		MemoryCurrent:    2147483648,
		MemoryLimit:      8589934592,
		MemoryRSS:        1610612736,
		MemoryCache:      536870912,
		MemoryFailCount:  0,
		IO:               []reading.DeviceIO{{Device: "8:16", Major: 8, Minor: 16, ReadBytes: 512, WriteBytes: 1024, ReadOps: 1, WriteOps: 2}},
		Tasks:            0,
		Available: reading.FieldCPU | reading.FieldMemoryCurrent | reading.FieldMemoryLimit | reading.FieldMemoryRSS | reading.FieldMemoryCache |
			reading.FieldMemoryFailCount | reading.FieldIO | reading.FieldTasks,
	}
	checkStats(t, read(t, r, slurmJob), want)
}

func TestReadV2(t *testing.T) {
	root := copyFixture(t)
	r := NewReader(fixtureLayout(root, true), filepath.Join(root, "sysfs"))
	checkStats(t, read(t, r, v2Job), wantV2Job())

	want := reading.Resources{
		CPUUserSeconds:   0.0002,
		CPUSystemSeconds: 0.00005,
		MemoryCurrent:    1000,
		MemoryLimit:      2147483648,
		MemoryRSS:        600,
		MemoryCache:      400,
		PSI:              [reading.NumPSIResources]reading.Pressure{reading.PSICPU: {SomeSeconds: 0.000042}},
		Tasks:            2,
		Available: reading.FieldCPU | reading.FieldMemoryCurrent | reading.FieldMemoryLimit | reading.FieldMemoryRSS | reading.FieldMemoryCache |
			reading.FieldMemoryFailCount | reading.FieldIO | reading.FieldPSICPUSome | reading.FieldTasks,
	}
	checkStats(t, read(t, r, v2Limited), want)
}

// On a hybrid layout each cgroup is read from the hierarchy that has it.
func TestReadHybridPicksHierarchyPerCgroup(t *testing.T) {
	root := copyFixture(t)
	r := NewReader(fixtureLayout(root, true, allV1...), filepath.Join(root, "sysfs"))
	checkStats(t, read(t, r, slurmStep), wantV1Step())
	checkStats(t, read(t, r, v2Job), wantV2Job())
}

func TestReadMissingControllerIsUnavailable(t *testing.T) {
	root := copyFixture(t)
	r := NewReader(fixtureLayout(root, false, "cpuacct", "memory"), filepath.Join(root, "sysfs"))
	want := wantV1Step()
	want.IO = nil
	// Without pids, tasks falls back to the step's own tasks file.
	want.Tasks = 2
	want.Available &^= reading.FieldIO | reading.FieldTasksRecursive
	checkStats(t, read(t, r, slurmStep), want)

	// A controller that is mounted but lacks the cgroup is the same.
	if err := os.RemoveAll(filepath.Join(root, "cgroup-v1", "memory", "slurm_localhost")); err != nil {
		t.Fatal(err)
	}
	s := read(t, r, slurmStep)
	const mem = reading.FieldMemoryCurrent | reading.FieldMemoryLimit | reading.FieldMemoryRSS | reading.FieldMemoryCache | reading.FieldMemorySwap |
		reading.FieldMemoryFailCount | reading.FieldMemoryOOMKills
	if s.Available&mem != 0 || s.MemoryCurrent != 0 || s.MemoryLimit != 0 {
		t.Errorf("memory fields of a cgroup missing under memory: available %b, current %d, limit %d", s.Available&mem, s.MemoryCurrent, s.MemoryLimit)
	}
	if !s.Available.Has(reading.FieldCPU) || s.CPUUserSeconds != 12.345678901 {
		t.Errorf("cpu = %v (available %v), want 12.345678901", s.CPUUserSeconds, s.Available.Has(reading.FieldCPU))
	}
}

func TestReadNoSuchCgroup(t *testing.T) {
	root := copyFixture(t)
	r := NewReader(fixtureLayout(root, true, allV1...), filepath.Join(root, "sysfs"))
	s, err := r.Read("/slurm_localhost/uid_0/job_6")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
	if s.Available != 0 {
		t.Errorf("available = %b, want none", s.Available)
	}
	if _, err := NewReader(Layout{}, "").Read("/"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("empty layout: err = %v, want fs.ErrNotExist", err)
	}
}

func TestReadBadPath(t *testing.T) {
	r := NewReader(Layout{V2Root: t.TempDir()}, "")
	for _, rel := range []string{"", "job", "/a/../../etc", "/.."} {
		if _, err := r.Read(rel); err == nil {
			t.Errorf("Read(%q) succeeded, want an error", rel)
		}
	}
}

// A malformed file fails that file only: the error names the file and the
// line, and every other field is still read.
func TestReadMalformedFiles(t *testing.T) {
	root := copyFixture(t)
	step := filepath.Join(root, "cgroup-v1", "memory", strings.TrimPrefix(slurmStep, "/"))
	writeFile(t, filepath.Join(step, "memory.stat"), "cache 2\ntotal_rss 12x\ntotal_cache 5\n")
	blkio := filepath.Join(root, "cgroup-v1", "blkio", strings.TrimPrefix(slurmStep, "/"), "blkio.throttle.io_serviced_recursive")
	writeFile(t, blkio, "8:0 Read 1\nsda Write 2\n")
	r := NewReader(fixtureLayout(root, false, allV1...), filepath.Join(root, "sysfs"))
	s, err := r.Read(slurmStep)
	if err == nil {
		t.Fatal("Read succeeded, want errors for memory.stat and blkio")
	}
	for _, want := range []string{
		"parse " + filepath.Join(step, "memory.stat") + `: line 2 "total_rss 12x": invalid number`,
		"parse " + blkio + `: line 2 "sda Write 2": invalid device number`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v wraps fs.ErrNotExist; the cgroup exists", err)
	}
	want := wantV1Step()
	want.MemoryRSS, want.MemoryCache, want.MemorySwap, want.IO = 0, 0, 0, nil
	want.Available &^= reading.FieldMemoryRSS | reading.FieldMemoryCache | reading.FieldMemorySwap | reading.FieldIO
	checkStats(t, s, want)

	// v2: a pressure line without total, and a bad io.stat value.
	dir := filepath.Join(root, "cgroup-v2", strings.TrimPrefix(v2Job, "/"))
	writeFile(t, filepath.Join(dir, "memory.pressure"), "some avg10=0.00 avg60=0.00 avg300=0.00\n")
	writeFile(t, filepath.Join(dir, "io.stat"), "8:0 rbytes=-1 wbytes=0\n")
	writeFile(t, filepath.Join(dir, "memory.max"), "unlimited\n")
	r = NewReader(fixtureLayout(root, true), filepath.Join(root, "sysfs"))
	s, err = r.Read(v2Job)
	for _, want := range []string{
		"parse " + filepath.Join(dir, "memory.pressure") + `: line 1 "some avg10=0.00 avg60=0.00 avg300=0.00": no total= field`,
		"parse " + filepath.Join(dir, "io.stat") + `: line 1 "8:0 rbytes=-1 wbytes=0": invalid number`,
		"parse " + filepath.Join(dir, "memory.max") + `: line 1 "unlimited": invalid number`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\ndoes not contain %q", err, want)
		}
	}
	want = wantV2Job()
	want.IO, want.PSI[reading.PSIMemory], want.MemoryLimit = nil, reading.Pressure{}, 0
	want.Available &^= reading.FieldIO | reading.FieldPSIMemorySome | reading.FieldPSIMemoryFull | reading.FieldMemoryLimit
	checkStats(t, s, want)
}

// A cgroup file that exists but cannot be read (here: a directory where the
// file should be) is an error, and does not send the reader to the next
// hierarchy.
func TestReadUnreadableFileDoesNotFallBack(t *testing.T) {
	root := copyFixture(t)
	p := filepath.Join(root, "cgroup-v1", "cpuacct", strings.TrimPrefix(v2Job, "/"), "cpuacct.usage_user")
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	r := NewReader(fixtureLayout(root, true, allV1...), filepath.Join(root, "sysfs"))
	s, err := r.Read(v2Job)
	if err == nil || !strings.Contains(err.Error(), "read "+p+": ") {
		t.Fatalf("err = %v, want a read error naming %s", err, p)
	}
	if s.Available.Has(reading.FieldCPU) {
		t.Errorf("cpu read from v2 although v1 cpuacct has the cgroup: %v", s.CPUUserSeconds)
	}
	if !s.Available.Has(reading.FieldMemoryCurrent) || s.MemoryCurrent != 536870912 {
		t.Errorf("memory.current = %d, want 536870912 from v2", s.MemoryCurrent)
	}
}

func TestDeviceNameLearnedLater(t *testing.T) {
	root := copyFixture(t)
	r := NewReader(fixtureLayout(root, false, allV1...), filepath.Join(root, "sysfs"))
	if got := read(t, r, slurmStep).IO[1].Device; got != "253:0" {
		t.Fatalf("device = %q, want 253:0 before sysfs knows it", got)
	}
	dir := filepath.Join(root, "sysfs", "dev", "block", "253:0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "uevent"), "MAJOR=253\nMINOR=0\nDEVNAME=dm-0\nDEVTYPE=disk\n")
	if got := read(t, r, slurmStep).IO[1].Device; got != "dm-0" {
		t.Errorf("device = %q, want dm-0 once sysfs has it", got)
	}
}

// ReadInto must reuse s.IO and allocate nothing once device names are
// cached: it runs per workload per interval.
func TestReadIntoAllocs(t *testing.T) {
	root := copyFixture(t)
	for _, tc := range []struct {
		name string
		l    Layout
		rel  string
	}{
		{"v2", fixtureLayout(root, true), v2Job},
		{"v1", fixtureLayout(root, false, allV1...), slurmStep},
	} {
		r := NewReader(tc.l, filepath.Join(root, "sysfs"))
		var s reading.Resources
		if err := r.ReadInto(tc.rel, &s); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(100, func() { _ = r.ReadInto(tc.rel, &s) })
		if allocs != 0 {
			t.Errorf("%s: ReadInto allocates %v times per call, want 0", tc.name, allocs)
		}
	}
	r := NewReader(fixtureLayout(root, true), filepath.Join(root, "sysfs"))
	var s reading.Resources
	_ = r.ReadInto(v2Job, &s)
	checkStats(t, s, wantV2Job())
	io := &s.IO[0]
	_ = r.ReadInto(v2Job, &s)
	if &s.IO[0] != io {
		t.Error("ReadInto did not reuse s.IO")
	}
	checkStats(t, s, wantV2Job())
}

func BenchmarkRead(b *testing.B) {
	root := copyFixture(b)
	for _, bc := range []struct {
		name string
		l    Layout
		rel  string
	}{
		{"v1", fixtureLayout(root, false, allV1...), slurmStep},
		{"v2", fixtureLayout(root, true), v2Job},
		{"hybrid-v1", fixtureLayout(root, true, allV1...), slurmStep},
	} {
		r := NewReader(bc.l, filepath.Join(root, "sysfs"))
		b.Run(bc.name+"/Read", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Read(bc.rel); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/ReadInto", func(b *testing.B) {
			b.ReportAllocs()
			var s reading.Resources
			for b.Loop() {
				if err := r.ReadInto(bc.rel, &s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadHost reads the root cgroup of this host's real cgroupfs,
// whose files the kernel generates on each read (memory.stat dominates).
func BenchmarkReadHost(b *testing.B) {
	l, err := hostLayout()
	if err != nil {
		testenv.Need(b, "this host's cgroupfs: %v", err)
	}
	r := NewReader(l, "")
	var s reading.Resources
	if err := r.ReadInto("/", &s); err != nil {
		testenv.Need(b, "this host's cgroupfs: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := r.ReadInto("/", &s); err != nil {
			b.Fatal(err)
		}
	}
}

// A reader limited to some groups opens none of the others' files: their
// fields are unavailable, the chosen ones read as before.
func TestReadOnlyGroups(t *testing.T) {
	root := copyFixture(t)
	r := NewReader(fixtureLayout(root, false, allV1...), filepath.Join(root, "sysfs"))
	full := read(t, r, slurmStep)
	r.Only(GroupMemory)
	got := read(t, r, slurmStep)
	memory := reading.FieldMemoryCurrent | reading.FieldMemoryLimit | reading.FieldMemoryRSS | reading.FieldMemoryCache |
		reading.FieldMemorySwap | reading.FieldMemoryFailCount | reading.FieldMemoryOOMKills
	if got.Available&^memory != 0 || got.Available != full.Available&memory || got.Available == 0 {
		t.Errorf("memory only: available %b, want %b", got.Available, full.Available&memory)
	}
	if got.MemoryCurrent != full.MemoryCurrent || got.CPUUserSeconds != 0 || got.Tasks != 0 || len(got.IO) != 0 {
		t.Errorf("memory only: %+v", got)
	}
}

// A file longer than the read buffer is read whole, whether or not it is
// taken for one record (which ends at the first short read), and a pid
// list is read to its end.
func TestReadPathLongerThanBuffer(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	want := strings.Repeat("1234567\n", 3000) // 24,000 bytes, three buffers
	writeFile(t, p, want)
	for _, one := range []bool{true, false} {
		data, buf, err := readPath(append([]byte(p), 0), make([]byte, 8192), one)
		if err != nil || string(data) != want || len(buf) < len(want) {
			t.Errorf("oneRecord %v: %d bytes (%v), buffer %d; want %d", one, len(data), err, len(buf), len(want))
		}
	}
	root := copyFixture(t)
	l := fixtureLayout(root, false, "cpuacct")
	dir := filepath.Join(l.V1Roots["cpuacct"], "long")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "tasks"), want)
	r := NewReader(l, "")
	r.Only(GroupTasks)
	if s, err := r.Read("/long"); err != nil || s.Tasks != 3000 {
		t.Errorf("tasks of a 24,000-byte list: %d (%v), want 3000", s.Tasks, err)
	}
}
