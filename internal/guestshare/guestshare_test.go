package guestshare

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/power/hostshare"
	"github.com/wattrace/wattrace/pkg/reading"
)

const uuid = "2A7D9E4B-1C3F-4A5B-8D6E-7F8091A2B3C4"

// snap is a host snapshot at second sec with one VM holding dyn + idle J
// of package energy, and a container that must not be shared.
func snap(sec int, dyn, idle float64) *snapshot.Snapshot {
	return &snapshot.Snapshot{
		Time:  time.Unix(int64(1000+sec), 0),
		Zones: []snapshot.Zone{{ZoneID: reading.ZoneID{Name: "package", Socket: 0}, Source: "rapl"}},
		Workloads: []snapshot.Workload{
			{Level: "vm", Labels: []string{uuid, "web01", ""}, Energy: snapshot.Energy{}.Add(snapshot.ZoneSeries{Zone: "package", Source: "rapl"}, dyn, idle)},
			{Level: "container", Labels: []string{"abc", "c", "", "", "docker"}, Energy: snapshot.Energy{}.Add(snapshot.ZoneSeries{Zone: "package", Source: "rapl"}, 1, 0)},
		},
	}
}

func newWriter(t *testing.T, dir string) *Writer {
	t.Helper()
	w, err := New(Config{Dir: dir, Interval: time.Second, IdlePolicy: "even", Host: "hv1", BootID: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func fileJ(t *testing.T, dir string) float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, hostshare.ZoneFile("package")))
	if err != nil {
		t.Fatal(err)
	}
	uj, err := hostshare.ParseCounter(b)
	if err != nil {
		t.Fatal(err)
	}
	return float64(uj) / 1e6
}

// One directory per VM, named by its uuid: the package counter holds
// dynamic + idle, the metadata describes it; containers get nothing.
func TestWriterPublishesVM(t *testing.T) {
	root := t.TempDir()
	w := newWriter(t, root)
	if err := w.Write(snap(1, 30, 12.5)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "uuid-"+strings.ToLower(uuid))
	if j := fileJ(t, dir); j != 42.5 {
		t.Errorf("counter %v J, want 42.5 (30 dynamic + 12.5 idle)", j)
	}
	m, err := hostshare.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	z := m.Zones[0]
	if m.Domain.Name != "web01" || m.Domain.UUID != uuid || m.Host != "hv1" || m.BootID != "b1" || m.Seq != 1 || m.Resets != 0 ||
		!m.Updated.Equal(time.Unix(1001, 0)) || len(m.Zones) != 1 || z.Name != "package" || z.Method != "measured" ||
		z.Source != "rapl" || z.IdlePolicy != "even" {
		t.Errorf("meta %+v", m)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 2 || ents[0].Name() != LockFile || ents[1].Name() != "uuid-"+strings.ToLower(uuid) {
		t.Errorf("root holds %v, want the writer's lock and the VM's directory only", ents)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	// A snapshot already written is not written again.
	if err := w.Write(snap(1, 99, 0)); err != nil || fileJ(t, dir) != 42.5 {
		t.Errorf("same snapshot rewrote the counter: %v J (%v)", fileJ(t, dir), err)
	}
}

// A new writer (host exporter restart: its figures start from zero)
// continues from what the files hold, in the same epoch; a domain whose
// figure restarts within a run continues too.
func TestWriterMonotonicAcrossRestart(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "uuid-"+strings.ToLower(uuid))
	w := newWriter(t, root)
	for i, j := range []float64{10, 20, 35} {
		if err := w.Write(snap(i+1, j, 0)); err != nil {
			t.Fatal(err)
		}
	}
	m1, _ := hostshare.ReadMeta(dir)
	// Restart: the host's figure for the VM starts again at 0.
	w.Close()
	w = newWriter(t, root)
	for i, j := range []float64{0, 4, 9} {
		if err := w.Write(snap(10+i, j, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if j := fileJ(t, dir); j != 44 {
		t.Errorf("after restart: %v J, want 44 (35 + 9)", j)
	}
	// Within a run, the VM leaves the snapshot and comes back from 0.
	if err := w.Write(snap(20, 2, 0)); err != nil {
		t.Fatal(err)
	}
	if j := fileJ(t, dir); j != 46 {
		t.Errorf("after the domain's figure restarted: %v J, want 46", j)
	}
	m2, _ := hostshare.ReadMeta(dir)
	if m2.Epoch != m1.Epoch || m2.Resets != 0 || m2.Seq != 7 {
		t.Errorf("epoch %q→%q resets %d seq %d: want the same epoch, no reset, seq 7", m1.Epoch, m2.Epoch, m2.Resets, m2.Seq)
	}
}

// A directory whose counter cannot be read is started again from zero,
// marked: a new epoch and one more reset.
func TestWriterMarksReset(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "uuid-"+strings.ToLower(uuid))
	w := newWriter(t, root)
	if err := w.Write(snap(1, 50, 0)); err != nil {
		t.Fatal(err)
	}
	m1, _ := hostshare.ReadMeta(dir)
	if err := os.WriteFile(filepath.Join(dir, hostshare.ZoneFile("package")), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.Close()
	w = newWriter(t, root)
	if err := w.Write(snap(2, 3, 0)); err != nil {
		t.Fatal(err)
	}
	m2, _ := hostshare.ReadMeta(dir)
	if j := fileJ(t, dir); j != 3 || m2.Epoch == m1.Epoch || m2.Resets != 1 || m2.ResetAt.IsZero() {
		t.Errorf("counter %v J, epoch %q→%q, resets %d at %v: want 3 J under a new epoch, 1 reset", j, m1.Epoch, m2.Epoch, m2.Resets, m2.ResetAt)
	}
}

// Readers racing the writer never see a partial or decreasing file.
func TestWriterAtomic(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "uuid-"+strings.ToLower(uuid))
	w := newWriter(t, root)
	if err := w.Write(snap(0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Int64
	var reads atomic.Int64
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for !stop.Load() {
				b, err := os.ReadFile(filepath.Join(dir, hostshare.ZoneFile("package")))
				if err != nil {
					bad.Add(1)
					continue
				}
				v, err := hostshare.ParseCounter(b)
				if err != nil || v < last {
					bad.Add(1)
				}
				last = v
				if _, err := hostshare.ReadMeta(dir); err != nil {
					bad.Add(1)
				}
				reads.Add(1)
			}
		}()
	}
	for i := 1; i <= 300; i++ {
		if err := w.Write(snap(i, float64(i)*1.000001, 0)); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if bad.Load() != 0 || reads.Load() == 0 {
		t.Errorf("%d bad reads of %d", bad.Load(), reads.Load())
	}
}

// fixed serves one snapshot, which the test changes, and counts the
// times Run asked for it (each is one write).
type fixed struct {
	s     atomic.Pointer[snapshot.Snapshot]
	calls atomic.Int64
}

func (f *fixed) Fresh(time.Duration) *snapshot.Snapshot {
	f.calls.Add(1)
	return f.s.Load()
}

// Run writes at its interval, each new snapshot while it runs (not only the
// last), no more often than the interval, and once more when stopped.
func TestWriterRun(t *testing.T) {
	const interval = 20 * time.Millisecond
	root := t.TempDir()
	w, err := New(Config{Dir: root, Interval: interval, Host: "hv1"})
	if err != nil {
		t.Fatal(err)
	}
	src := &fixed{}
	src.s.Store(snap(1, 5, 0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() { done <- w.Run(ctx, src) }()
	dir := filepath.Join(root, "uuid-"+strings.ToLower(uuid))
	// Each snapshot in turn reaches the file while Run goes on.
	for i, want := range []float64{5, 8, 13} {
		src.s.Store(snap(1+i, want, 0))
		deadline := time.Now().Add(5 * time.Second)
		for !(hostshare.Present(dir) && fileJ(t, dir) == want) {
			if time.Now().After(deadline) {
				t.Fatalf("snapshot %d (%v J) not written within 5 s of a %v interval", i+1, want, interval)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Over 300 ms a 20 ms ticker fires at most 15 times (plus one tick
	// already pending), and a ticker that fired at all fires more than
	// twice even on a loaded machine.
	before := src.calls.Load()
	time.Sleep(300 * time.Millisecond)
	if n := src.calls.Load() - before; n < 3 || n > 16 {
		t.Errorf("%d writes in 300 ms at a %v interval, want 3 to 16", n, interval)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Stopped before its first tick, Run still writes the snapshot it has.
	root = t.TempDir()
	w, err = New(Config{Dir: root, Interval: time.Hour, Host: "hv1"})
	if err != nil {
		t.Fatal(err)
	}
	src = &fixed{}
	src.s.Store(snap(1, 21, 0))
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- w.Run(ctx, src) }()
	time.Sleep(20 * time.Millisecond)
	dir = filepath.Join(root, "uuid-"+strings.ToLower(uuid))
	if hostshare.Present(dir) {
		t.Error("written before the first tick of an hour's interval")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if j := fileJ(t, dir); j != 21 || src.calls.Load() != 1 {
		t.Errorf("after stop: %v J in %d writes, want 21 J in 1 (the stop's)", j, src.calls.Load())
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(Config{Dir: "", Interval: time.Second}); err == nil || !strings.Contains(err.Error(), "guests.share.path") {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := New(Config{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "guests.share.interval") {
		t.Errorf("zero interval: %v", err)
	}
}
