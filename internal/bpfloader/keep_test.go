package bpfloader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

// loadKept loads the accounting with Keep and registers its Close.
func loadKept(t *testing.T, keep string) (*Accounting, cgroup.Hierarchy, *cgroup.Resolver) {
	t.Helper()
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "/sys/fs/cgroup", "auto")
	if err != nil {
		t.Fatalf("detect hierarchy: %v", err)
	}
	a, err := Load(Options{Hierarchy: h, Keep: keep})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	return a, h, cgroup.NewResolver(h)
}

// exactShortProcesses runs n short processes in a new cgroup and checks
// that a's figure for the cgroup is the kernel's (98–102%).
func exactShortProcesses(t *testing.T, a *Accounting, h cgroup.Hierarchy, res *cgroup.Resolver, name string, n int) {
	t.Helper()
	dir, id, launcher, r0, u0 := shortProcesses(t, a, h, res, name, n)
	if err := launcher.Run(); err != nil {
		t.Fatalf("launcher: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	r1, err := a.Read()
	if err != nil {
		t.Fatal(err)
	}
	got := float64(findCgroup(r1, id).CPUNs - findCgroup(r0, id).CPUNs)
	want := float64(cgUsage(t, res, h, dir) - u0)
	t.Logf("%s (%s): %d processes, bpf %.0f ns, kernel %.0f ns (%.2f%%)", name, a.Kept().How, n, got, want, 100*got/want)
	if want < float64(n)*5e6 {
		t.Fatalf("cgroup used %.0f ns, less than %d × 5 ms: the processes did not run", want, n)
	}
	if got < 0.98*want || got > 1.02*want {
		t.Errorf("%s: attributed %.0f ns of the cgroup's %.0f ns (%.2f%%), want 98–102%%", name, got, want, 100*got/want)
	}
}

// The first process loads and keeps the programs; the next opens them
// (no load), and its figures are as exact as a fresh load's. While one
// holds the kept copy, a second loads its own, and both stay exact over
// the same processes.
func TestKeptCopyReused(t *testing.T) {
	root := testenv.BPFFS(t)
	a, h, res := loadKept(t, root)
	k := a.Kept()
	if k.How != KeptPinned || filepath.Dir(k.Dir) != filepath.Join(root, "wattrace-measure-0") || k.Note != "" {
		t.Fatalf("first load: %+v, want loaded and kept under %s/wattrace-measure-0", k, root)
	}
	a.Close()

	start := time.Now()
	b, _, _ := loadKept(t, root)
	took := time.Since(start)
	if got := b.Kept(); got.How != KeptReused || got.Dir != k.Dir {
		t.Fatalf("second load: %+v, want the copy in %s reused", got, k.Dir)
	}
	t.Logf("reused in %v", took)
	c, _, _ := loadKept(t, root)
	if got := c.Kept(); got.How != KeptNo || !strings.Contains(got.Note, "in use by another measure") {
		t.Fatalf("load while the copy is held: %+v, want a copy of its own, said", got)
	}
	dir, id, launcher, rb0, u0 := shortProcesses(t, b, h, res, "kept", 100)
	rc0, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	if err := launcher.Run(); err != nil {
		t.Fatalf("launcher: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	want := float64(cgUsage(t, res, h, dir) - u0)
	for _, x := range []struct {
		name string
		a    *Accounting
		r0   uint64
	}{{"reused", b, findCgroup(rb0, id).CPUNs}, {"own", c, findCgroup(rc0, id).CPUNs}} {
		r1, err := x.a.Read()
		if err != nil {
			t.Fatal(err)
		}
		got := float64(findCgroup(r1, id).CPUNs - x.r0)
		t.Logf("%s: bpf %.0f ns, kernel %.0f ns (%.2f%%)", x.name, got, want, 100*got/want)
		if want < 100*5e6 || got < 0.98*want || got > 1.02*want {
			t.Errorf("%s copy: attributed %.0f ns of the cgroup's %.0f ns, want 98–102%%", x.name, got, want)
		}
	}
}

// What the previous process left in the kept exit maps is emptied before
// the hooks run: with exited_cgroups full of entries of cgroups long gone
// (a boot's worth of measures), a new cgroup's exits still find room.
func TestKeptCopyStartsEmpty(t *testing.T) {
	root := testenv.BPFFS(t)
	a, _, _ := loadKept(t, root)
	dir := a.Kept().Dir
	a.Close()
	open := func(name string) *ebpf.Map {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	// Fake keys: cgroup ids and processes that no cgroup or process has.
	cg := open("exited_cgroups")
	cgKeys := make([]uint64, cg.MaxEntries())
	for i := range cgKeys {
		cgKeys[i] = 1<<62 + uint64(i)
	}
	// Real exits recorded while the first copy ran (any process on the
	// node) may hold slots already: the batch then stops at the full map,
	// which is what the test needs, whoever filled it.
	if _, err := cg.BatchUpdate(cgKeys, make([]accountingCounters, len(cgKeys)), nil); err != nil && !errors.Is(err, unix.E2BIG) {
		t.Fatalf("fill exited_cgroups: %v", err)
	}
	pr := open("exited_procs")
	prKeys := make([]accountingProcKey, pr.MaxEntries())
	for i := range prKeys {
		prKeys[i] = accountingProcKey{Tgid: 1<<31 + uint32(i), Start: 1}
	}
	if _, err := pr.BatchUpdate(prKeys, make([]accountingProcExit, len(prKeys)), nil); err != nil && !errors.Is(err, unix.E2BIG) {
		t.Fatalf("fill exited_procs: %v", err)
	}
	// Full: one more fake key is refused.
	if err := cg.Update(uint64(1<<62-1), accountingCounters{}, ebpf.UpdateNoExist); !errors.Is(err, unix.E2BIG) {
		t.Fatalf("exited_cgroups not full: one more key gave %v", err)
	}
	if err := pr.Update(accountingProcKey{Tgid: 1<<31 - 1, Start: 1}, accountingProcExit{}, ebpf.UpdateNoExist); !errors.Is(err, unix.E2BIG) {
		t.Fatalf("exited_procs not full: one more key gave %v", err)
	}
	b, h, res := loadKept(t, root)
	if b.Kept().How != KeptReused {
		t.Fatalf("%+v, want reused", b.Kept())
	}
	exactShortProcesses(t, b, h, res, "full", 100)
	drops, err := b.MapDrops()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range drops {
		if d.Drops != 0 {
			t.Errorf("%s dropped %d exits", d.Map, d.Drops)
		}
	}
}

// A path another user made, or one that could be swapped under us, is
// never trusted: the process loads its own copy, says why, and leaves
// what it found alone.
func TestKeptPathOfAnotherUserRefused(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		plant      func(t *testing.T, root, user string)
	}{
		{"user directory owned by another", "owned by uid 65534", func(t *testing.T, root, user string) {
			mkdir(t, user, 0o700)
			chown(t, user)
		}},
		{"user directory writable by others", "writable by others", func(t *testing.T, root, user string) {
			mkdir(t, user, 0o700)
			if err := os.Chmod(user, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"user directory a link", "not a directory", func(t *testing.T, root, user string) {
			other := filepath.Join(root, "elsewhere")
			mkdir(t, other, 0o700)
			if err := os.Symlink(other, user); err != nil {
				t.Fatal(err)
			}
		}},
		{"root writable by everyone, not sticky", "not sticky", func(t *testing.T, root, user string) {
			if err := os.Chmod(root, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"a pin of another user in the kept copy", "owned by uid 65534", func(t *testing.T, root, user string) {
			a, _, _ := loadKept(t, root)
			dir := a.Kept().Dir
			a.Close()
			chown(t, filepath.Join(dir, "exited_cgroups"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := testenv.BPFFS(t)
			user := filepath.Join(root, "wattrace-measure-0")
			tc.plant(t, root, user)
			before := tree(t, root)
			a, h, res := loadKept(t, root)
			k := a.Kept()
			if k.How != KeptNo || !strings.Contains(k.Note, tc.want) {
				t.Fatalf("%+v, want a copy of its own and a note saying %q", k, tc.want)
			}
			if after := tree(t, root); after != before {
				t.Errorf("what was found changed:\n%s\nbecame\n%s", before, after)
			}
			exactShortProcesses(t, a, h, res, "refused", 50)
		})
	}
}

// A kept copy of the user's own that is incomplete or is not what the
// programs use is replaced, not used.
func TestBrokenKeptCopyReplaced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"a program missing", func(t *testing.T, dir string) { remove(t, filepath.Join(dir, "task_move")) }},
		{"an incompatible map", func(t *testing.T, dir string) {
			remove(t, filepath.Join(dir, "exited_cgroups"))
			pinMap(t, filepath.Join(dir, "exited_cgroups"), &ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 16, MaxEntries: 16})
		}},
		{"a compatible map the programs do not use", func(t *testing.T, dir string) {
			remove(t, filepath.Join(dir, "exited_cgroups"))
			pinMap(t, filepath.Join(dir, "exited_cgroups"), &ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 16, MaxEntries: 32768})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := testenv.BPFFS(t)
			a, _, _ := loadKept(t, root)
			dir := a.Kept().Dir
			a.Close()
			tc.damage(t, dir)
			b, h, res := loadKept(t, root)
			if k := b.Kept(); k.How != KeptPinned || k.Dir != dir || k.Note != "" {
				t.Fatalf("%+v, want the copy in %s made again", k, dir)
			}
			exactShortProcesses(t, b, h, res, "replaced", 50)
		})
	}
}

// Another build's copy (another key) is removed when a new one is kept,
// unless a process holds it.
func TestOtherKeptCopiesRemoved(t *testing.T) {
	root := testenv.BPFFS(t)
	user := filepath.Join(root, "wattrace-measure-0")
	mkdir(t, user, 0o700)
	old, held := filepath.Join(user, "0123456789abcdef01234567"), filepath.Join(user, "89abcdef0123456789abcdef")
	for _, d := range []string{old, held} {
		mkdir(t, d, 0o700)
		pinMap(t, filepath.Join(d, "exited_cgroups"), &ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 16, MaxEntries: 16})
	}
	lock, err := lockDir(held, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	a, _, _ := loadKept(t, root)
	if a.Kept().How != KeptPinned {
		t.Fatalf("%+v, want loaded and kept", a.Kept())
	}
	if _, err := os.Lstat(old); !os.IsNotExist(err) {
		t.Errorf("the other build's copy %s is still there (%v)", old, err)
	}
	if _, err := os.Lstat(filepath.Join(held, "exited_cgroups")); err != nil {
		t.Errorf("the copy a process holds was removed: %v", err)
	}
}

// Where Keep is no BPF file system, nothing is kept and nothing said.
func TestKeepNeedsABPFFileSystem(t *testing.T) {
	dir := t.TempDir()
	a, _, _ := loadKept(t, dir)
	if k := a.Kept(); k.How != KeptNo || k.Note != "" {
		t.Errorf("%+v, want loaded, without a note", k)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("made %v in a directory that is not a BPF file system", names)
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, path string) {
	t.Helper()
	if err := os.Lchown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func pinMap(t *testing.T, path string, spec *ebpf.MapSpec) {
	t.Helper()
	m, err := ebpf.NewMap(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(path); err != nil {
		t.Fatal(err)
	}
}

// tree lists what is under root: path, mode and owner.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v uid %d\n", strings.TrimPrefix(p, root), info.Mode(), st.Uid)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// keepRootEnv passes the test's BPF file system to its run as nobody.
const keepRootEnv = "WATTRACE_TEST_KEEP_ROOT"

// A user who cannot load the programs (nobody, no capability) fails as
// before and leaves nothing in the BPF file system, though its mode
// (1777) would let it make its directory.
func TestKeepLeavesNothingForAUserWhoCannotLoad(t *testing.T) {
	if os.Getenv(keepRootEnv) == "" {
		root := testenv.BPFFS(t)
		t.Setenv(keepRootEnv, root)
		if !testenv.AsNobody(t, "TestKeepLeavesNothingForAUserWhoCannotLoad") {
			if names, _ := os.ReadDir(root); len(names) != 2 { // maps.debug, progs.debug
				t.Errorf("the BPF file system holds %v after nobody's load", names)
			}
			return
		}
	}
	root := os.Getenv(keepRootEnv)
	h, err := cgroup.Detect("/proc", "/sys/fs/cgroup", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if a, err := Load(Options{Hierarchy: h, Keep: root}); err == nil {
		a.Close()
		t.Fatal("loaded without privileges")
	}
	if _, err := os.Lstat(filepath.Join(root, "wattrace-measure-65534")); !os.IsNotExist(err) {
		t.Errorf("made its directory though it could not load (%v)", err)
	}
}
