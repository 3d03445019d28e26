package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
)

func hostHierarchy(t *testing.T) Hierarchy {
	t.Helper()
	testenv.RequireRoot(t)
	h, err := Detect("/proc", "", "auto")
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	return h
}

func statIno(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return st.Ino
}

func TestResolverHost(t *testing.T) {
	h := hostHierarchy(t)
	top := testenv.TempDir(t, h.Mount)
	a := testenv.Mkdir(t, filepath.Join(top, "a"))
	b := testenv.Mkdir(t, filepath.Join(top, "b"))
	relTop := "/" + filepath.Base(top)
	relA, relB := relTop+"/a", relTop+"/b"

	r := NewResolver(h)
	if r.Hierarchy() != h {
		t.Fatalf("Hierarchy() = %+v", r.Hierarchy())
	}
	// Path on a fresh resolver must find the cgroup by walking.
	if p, ok := r.Path(statIno(t, a)); !ok || p != relA {
		t.Fatalf("Path(ino of a) = %q, %v; want %q", p, ok, relA)
	}
	for rel, dir := range map[string]string{"/": h.Mount, relTop: top, relA: a, relB: b} {
		id, err := r.ID(rel)
		if err != nil {
			t.Fatalf("ID(%s): %v", rel, err)
		}
		if want := statIno(t, dir); id != want {
			t.Errorf("ID(%s) = %d, want inode %d", rel, id, want)
		}
		if p, ok := r.Path(id); !ok || p != rel {
			t.Errorf("Path(%d) = %q, %v; want %q", id, p, ok, rel)
		}
	}

	nodes, err := r.Scan()
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	byPath := map[string]Node{}
	for _, n := range nodes {
		byPath[n.Path] = n
	}
	if byPath["/"].Parent != 0 || byPath[relA].Parent != byPath[relTop].ID || byPath[relTop].Parent != byPath["/"].ID {
		t.Errorf("parents wrong: root %+v top %+v a %+v", byPath["/"], byPath[relTop], byPath[relA])
	}

	// A removed cgroup disappears after a rescan.
	idB := statIno(t, b)
	testenv.Remove(t, b)
	r.now = func() time.Time { return time.Now().Add(time.Hour) } // lift the rate limit
	if _, ok := r.Path(1<<62 + 3); ok {                           // a miss rescans
		t.Fatal("unknown id resolved")
	}
	if p, ok := r.Path(idB); ok {
		t.Errorf("Path(removed b) = %q, still known after rescan", p)
	}
	if _, err := r.ID(relB); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ID(removed b) error = %v, want not-exist", err)
	}
}

func TestResolverRateLimit(t *testing.T) {
	h := hostHierarchy(t)
	top := testenv.TempDir(t, h.Mount)
	r := NewResolver(h)
	now := time.Now()
	r.now = func() time.Time { return now }

	if _, ok := r.Path(1<<62 + 7); ok {
		t.Fatal("unknown id resolved")
	}
	if r.walks != 1 {
		t.Fatalf("walks = %d after first miss, want 1", r.walks)
	}
	for range 100 {
		r.Path(1<<62 + 7)
	}
	if r.walks != 1 {
		t.Fatalf("walks = %d after 100 misses within a second, want 1", r.walks)
	}
	// A cgroup created just after the walk stays unknown until the limit
	// lapses; then one miss finds it.
	c := testenv.Mkdir(t, filepath.Join(top, "late"))
	id := statIno(t, c)
	if _, ok := r.Path(id); ok {
		t.Fatal("found a new cgroup without walking")
	}
	now = now.Add(1100 * time.Millisecond)
	if p, ok := r.Path(id); !ok || p != "/"+filepath.Base(top)+"/late" {
		t.Fatalf("Path(late) = %q, %v after the limit lapsed", p, ok)
	}
	if r.walks != 2 {
		t.Fatalf("walks = %d, want 2", r.walks)
	}
}

// An id a walk did not find does not walk again for missRetry, however
// often it is asked for; a new id still does.
func TestResolverRemembersMisses(t *testing.T) {
	h := hostHierarchy(t)
	top := testenv.TempDir(t, h.Mount)
	r := NewResolver(h)
	now := time.Now()
	r.now = func() time.Time { return now }
	const gone = 1<<62 + 9
	r.Path(gone)
	for i := 0; i < 10; i++ {
		now = now.Add(2 * time.Second) // past minRescan each time
		r.Path(gone)
	}
	if r.walks != 1 {
		t.Fatalf("walks = %d for one unknown id over 20 s, want 1", r.walks)
	}
	c := testenv.Mkdir(t, filepath.Join(top, "new"))
	if _, ok := r.Path(statIno(t, c)); !ok || r.walks != 2 {
		t.Fatalf("a new cgroup: found %v after %d walks, want found after 2", ok, r.walks)
	}
	now = now.Add(missRetry)
	r.Path(gone)
	if r.walks != 3 {
		t.Fatalf("walks = %d after missRetry, want 3", r.walks)
	}
}

// Gone tells an id a walk looked for and did not find (its cgroup was
// removed: the kernel never gives the id to another) from one the rate
// limit kept Path from looking for, and from a live one.
func TestResolverGone(t *testing.T) {
	h := hostHierarchy(t)
	top := testenv.TempDir(t, h.Mount)
	r := NewResolver(h)
	now := time.Now()
	r.now = func() time.Time { return now }
	live := testenv.Mkdir(t, filepath.Join(top, "live"))
	removed := testenv.Mkdir(t, filepath.Join(top, "removed"))
	idLive, idRemoved := statIno(t, live), statIno(t, removed)
	testenv.Remove(t, removed)
	if _, ok := r.Path(idLive); !ok {
		t.Fatal("live cgroup not found")
	}
	if _, ok := r.Path(idRemoved); ok {
		t.Fatal("removed cgroup named")
	}
	if r.Gone(idRemoved) || r.Gone(idLive) {
		t.Fatal("gone before any walk looked for it (the rate limit held the walk back)")
	}
	now = now.Add(minRescan)
	if _, ok := r.Path(idRemoved); ok || !r.Gone(idRemoved) || r.Gone(idLive) {
		t.Errorf("after a walk: removed gone %v, live gone %v; want true, false", r.Gone(idRemoved), r.Gone(idLive))
	}
	if r.Walks() != 2 {
		t.Errorf("%d walks, want 2", r.Walks())
	}
}

func TestResolverConcurrent(t *testing.T) {
	h := hostHierarchy(t)
	top := testenv.TempDir(t, h.Mount)
	rel := "/" + filepath.Base(top)
	r := NewResolver(h)
	want := statIno(t, top)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				if i%2 == 0 {
					if p, ok := r.Path(want); !ok || p != rel {
						t.Errorf("Path = %q, %v", p, ok)
						return
					}
				} else if id, err := r.ID(rel); err != nil || id != want {
					t.Errorf("ID = %d, %v", id, err)
					return
				}
				r.Path(12345678901) // misses share the rate-limited walk
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := r.Scan(); err != nil {
				t.Errorf("Scan: %v", err)
			}
		}
	})
	wg.Wait()
}

func TestUsageHost(t *testing.T) {
	h := hostHierarchy(t)
	top := testenv.TempDir(t, h.Mount)
	a := testenv.Mkdir(t, filepath.Join(top, "a"))
	relTop, relA := "/"+filepath.Base(top), "/"+filepath.Base(top)+"/a"
	r := NewResolver(h)
	if h.Kind == CPU {
		if _, err := r.Usage(relA); !errors.Is(err, ErrUsageUnavailable) {
			t.Fatalf("Usage on v1 cpu = %v, want ErrUsageUnavailable", err)
		}
		testenv.Need(t, "the rest needs usage, which needs the cpuacct or cgroup2 hierarchy; this host's is v1 cpu")
	}
	u0, err := r.Usage(relA)
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	// Busy in a child process: moving the test binary would move all of
	// its threads.
	// It runs until the cgroup has been charged 300 ms: on a loaded machine
	// 500 ms of wall time gave it less (273 ms beside other tests' load).
	cmd := testenv.Spawn(t, a, "while :; do :; done")
	var u1 uint64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if u1, err = r.Usage(relA); err != nil {
			t.Fatalf("Usage: %v", err)
		}
		if u1 >= u0+uint64(300*time.Millisecond) || time.Now().After(deadline) {
			break
		}
	}
	testenv.Kill(cmd)
	top1, err := r.Usage(relTop)
	if err != nil {
		t.Fatalf("Usage(top): %v", err)
	}
	if d := u1 - u0; u1 < u0 || d < uint64(300*time.Millisecond) {
		t.Errorf("usage grew by %v in 20 s of busy loop, want ≥300ms", time.Duration(d))
	}
	if top1 < u1 {
		t.Errorf("parent usage %d < child usage %d: usage must be hierarchical", top1, u1)
	}
	if _, err := r.Usage("/no-such-cgroup-here"); err == nil {
		t.Error("Usage of a missing cgroup succeeded")
	}
	if _, err := r.Usage("relative"); err == nil {
		t.Error("Usage of a relative path succeeded")
	}
}

// TestUsageFixture checks the file formats against a fake tree.
func TestUsageFixture(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "v2/x/cpu.stat"), "usage_usec 1500\nuser_usec 1000\n")
	write(filepath.Join(dir, "acct/x/cpuacct.usage"), "123456789\n")
	write(filepath.Join(dir, "cpu/x/cpu.shares"), "1024\n")
	write(filepath.Join(dir, "comount/x/cpuacct.usage"), "42\n")
	tests := []struct {
		h       Hierarchy
		want    uint64
		wantErr error
	}{
		{Hierarchy{V2, dir + "/v2"}, 1500000, nil},
		{Hierarchy{CPUAcct, dir + "/acct"}, 123456789, nil},
		{Hierarchy{CPU, dir + "/cpu"}, 0, ErrUsageUnavailable},
		{Hierarchy{CPU, dir + "/comount"}, 42, nil},
	}
	for _, tt := range tests {
		got, err := NewResolver(tt.h).Usage("/x")
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("%s: err = %v, want %v", tt.h.Kind, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: Usage = %d, %v; want %d", tt.h.Kind, got, err, tt.want)
		}
	}
}

// A removed cgroup stops existing at once, though its id is still cached.
func TestExists(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := Detect("/proc", "/sys/fs/cgroup", "auto")
	if err != nil {
		t.Fatal(err)
	}
	r := NewResolver(h)
	dir := testenv.TempDir(t, h.Mount)
	rel := "/" + filepath.Base(dir)
	id, err := r.ID(rel)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Exists(id, rel) {
		t.Fatal("a cgroup that is there does not exist")
	}
	if r.Exists(id+1, rel) {
		t.Error("another id exists at the same path")
	}
	testenv.Remove(t, dir)
	if r.Exists(id, rel) {
		t.Error("a removed cgroup still exists")
	}
	if _, ok := r.lookup(id); ok {
		t.Error("a removed cgroup's id is still cached")
	}
}
