package sysfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

type tree struct {
	t          *testing.T
	sys, proc  string
	devices    string
	nextFD     map[int]int
	fdinfoPath map[string]string // pid/client → fdinfo file
}

func newTree(t *testing.T) *tree {
	root := t.TempDir()
	tr := &tree{t: t, sys: filepath.Join(root, "sys"), proc: filepath.Join(root, "proc"),
		nextFD: map[int]int{}, fdinfoPath: map[string]string{}}
	tr.devices = filepath.Join(tr.sys, "devices", "pci0000:00")
	tr.mkdir(filepath.Join(tr.sys, "class", "drm", "card0-DP-1"))
	tr.mkdir(filepath.Join(tr.sys, "bus", "pci", "drivers"))
	return tr
}

func (tr *tree) mkdir(p string) {
	if err := os.MkdirAll(p, 0o755); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) write(p, s string) {
	tr.mkdir(filepath.Dir(p))
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) link(target, p string) {
	tr.mkdir(filepath.Dir(p))
	if err := os.Symlink(target, p); err != nil {
		tr.t.Fatal(err)
	}
}

// card adds DRM card n at PCI address addr bound to driver with hwmon
// files; it returns the hwmon directory.
func (tr *tree) card(n int, addr, driver string, hwmon map[string]string) string {
	dev := filepath.Join(tr.devices, addr)
	tr.write(filepath.Join(dev, "device"), "0x744c\n")
	tr.mkdir(filepath.Join(tr.sys, "bus", "pci", "drivers", driver))
	tr.link(filepath.Join(tr.sys, "bus", "pci", "drivers", driver), filepath.Join(dev, "driver"))
	hw := filepath.Join(dev, "hwmon", fmt.Sprintf("hwmon%d", n+2))
	for f, v := range hwmon {
		tr.write(filepath.Join(hw, f), v)
	}
	tr.link(dev, filepath.Join(tr.sys, "class", "drm", fmt.Sprintf("card%d", n), "device"))
	return hw
}

// client opens DRM client id on pdev in pid (a new fd) and returns the
// fdinfo file to update.
func (tr *tree) client(pid int, pdev, driver string, id int) string {
	fd := tr.nextFD[pid] + 3
	tr.nextFD[pid] = fd - 2
	tr.link("/dev/dri/renderD128", filepath.Join(tr.proc, fmt.Sprint(pid), "fd", fmt.Sprint(fd)))
	p := filepath.Join(tr.proc, fmt.Sprint(pid), "fdinfo", fmt.Sprint(fd))
	tr.write(p, "")
	tr.fdinfoPath[fmt.Sprint(pid, "/", id)] = p
	return p
}

func busy(driver, pdev string, id int, class string, ns uint64) string {
	return fmt.Sprintf("pos:\t0\nflags:\t02100002\nmnt_id:\t25\ndrm-driver:\t%s\ndrm-pdev:\t%s\ndrm-client-id:\t%d\n"+
		"drm-engine-%s:\t%d ns\ndrm-engine-capacity-%s:\t1\ndrm-memory-vram:\t1024 KiB\n", driver, pdev, id, class, ns, class)
}

// A client that opens between two scans is counted from zero, a client
// whose busy time falls is rejected (not credited), and one busier than
// wall time is rejected.
func TestClientsAppearAndMisbehave(t *testing.T) {
	tr := newTree(t)
	hw := tr.card(0, "0000:03:00.0", "amdgpu", map[string]string{"power1_input": "100000000"})
	a := tr.client(10, "0000:03:00.0", "amdgpu", 1)
	tr.write(a, busy("amdgpu", "0000:03:00.0", 1, "gfx", 5e9))
	src, _ := Open(Options{SysfsRoot: tr.sys, ProcfsRoot: tr.proc}, nil)
	src.Read(context.Background(), t0)
	b := tr.client(11, "0000:03:00.0", "amdgpu", 2)
	tr.write(a, busy("amdgpu", "0000:03:00.0", 1, "gfx", 5e9+300e6))
	tr.write(b, busy("amdgpu", "0000:03:00.0", 2, "gfx", 100e6))
	rs, _ := src.Read(context.Background(), t0.Add(time.Second))
	if u := rs[0].Usage; u[10] != 300e6 || u[11] != 100e6 {
		t.Fatalf("usage %v", u)
	}
	tr.write(a, busy("amdgpu", "0000:03:00.0", 1, "gfx", 1e9))   // backwards
	tr.write(b, busy("amdgpu", "0000:03:00.0", 2, "gfx", 100e9)) // 99.9 s busy in 1 s
	tr.write(filepath.Join(hw, "power1_input"), "9000000000000") // 9 MW
	rs, _ = src.Read(context.Background(), t0.Add(2*time.Second))
	if len(rs[0].Usage) != 0 || rs[0].OK {
		t.Fatalf("bad readings credited: %+v", rs[0])
	}
	n := src.Rejects().Counts()
	if n["backwards"] != 1 || n["too_fast"] != 1 || n["out_of_range"] != 1 {
		t.Errorf("rejections %v", n)
	}
}

// With debugfs's client tables, only the processes listed there are read:
// a DRM client of a process debugfs does not list is not seen.
func TestDebugfsClients(t *testing.T) {
	tr := newTree(t)
	tr.card(0, "0000:03:00.0", "amdgpu", map[string]string{"power1_input": "100000000"})
	a := tr.client(10, "0000:03:00.0", "amdgpu", 1)
	b := tr.client(11, "0000:03:00.0", "amdgpu", 2)
	tr.write(filepath.Join(tr.sys, "kernel", "debug", "dri", "128", "clients"),
		"             command   tgid dev master a   uid      magic\n"+
			"         my prog 2a     10 128   n    y     0          0\n")
	src, _ := Open(Options{SysfsRoot: tr.sys, ProcfsRoot: tr.proc}, nil)
	tr.write(a, busy("amdgpu", "0000:03:00.0", 1, "gfx", 0))
	tr.write(b, busy("amdgpu", "0000:03:00.0", 2, "gfx", 0))
	src.Read(context.Background(), t0)
	tr.write(a, busy("amdgpu", "0000:03:00.0", 1, "gfx", 2e8))
	tr.write(b, busy("amdgpu", "0000:03:00.0", 2, "gfx", 3e8))
	rs, _ := src.Read(context.Background(), t0.Add(time.Second))
	if u := rs[0].Usage; len(u) != 1 || u[10] != 2e8 {
		t.Fatalf("usage %v", u)
	}
}

func TestNoDRM(t *testing.T) {
	src, err := Open(Options{SysfsRoot: t.TempDir(), ProcfsRoot: t.TempDir()}, nil)
	if src != nil || err != nil {
		t.Fatal(src, err)
	}
}

// BenchmarkRead8Cards100Procs: 8 amdgpu cards and 100 processes with a
// DRM client each, among 400 other processes with two non-DRM fds each, in
// a fixture tree on disk: the process scan, the hwmon reads and the
// per-client validation. "debugfs" lists the 100 clients' pids in
// <debugfs>/dri/*/clients, as a root exporter with debugfs mounted sees;
// "scan-all" reads every process's fds.
func BenchmarkRead8Cards100Procs(b *testing.B) {
	for _, withDebugfs := range []bool{false, true} {
		name := "scan-all"
		if withDebugfs {
			name = "debugfs"
		}
		b.Run(name, func(b *testing.B) {
			tt := &testing.T{}
			root := b.TempDir()
			tr := &tree{t: tt, sys: filepath.Join(root, "sys"), proc: filepath.Join(root, "proc"),
				nextFD: map[int]int{}, fdinfoPath: map[string]string{}}
			tr.devices = filepath.Join(tr.sys, "devices", "pci0000:00")
			for c := 0; c < 8; c++ {
				tr.card(c, fmt.Sprintf("0000:%02x:00.0", 0x10+c), "amdgpu", map[string]string{"power1_average": "200000000"})
			}
			table := "             command   tgid dev master a   uid      magic\n"
			for p := 0; p < 500; p++ {
				pid := 1000 + p
				for fd := 0; fd < 2; fd++ {
					tr.link("/dev/null", filepath.Join(tr.proc, fmt.Sprint(pid), "fd", fmt.Sprint(fd)))
					tr.write(filepath.Join(tr.proc, fmt.Sprint(pid), "fdinfo", fmt.Sprint(fd)), "pos:\t0\n")
				}
				if p >= 100 {
					continue
				}
				pdev := fmt.Sprintf("0000:%02x:00.0", 0x10+p%8)
				f := tr.client(pid, pdev, "amdgpu", pid)
				tr.write(f, busy("amdgpu", pdev, pid, "gfx", 0))
				table += fmt.Sprintf("%20s %5d %3d   n    y %5d %10d\n", "python3", pid, 128, 0, 0)
			}
			if withDebugfs {
				tr.write(filepath.Join(tr.sys, "kernel", "debug", "dri", "128", "clients"), table)
			}
			src, err := Open(Options{SysfsRoot: tr.sys, ProcfsRoot: tr.proc}, nil)
			if err != nil || src == nil {
				b.Fatal(err)
			}
			now := t0
			src.Read(context.Background(), now)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now = now.Add(time.Second)
				rs, _ := src.Read(context.Background(), now)
				if len(rs) != 8 || !rs[0].OK {
					b.Fatal(len(rs))
				}
			}
		})
	}
}
