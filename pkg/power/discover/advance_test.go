package discover

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
)

// stepMeter reads 0 J for its first zero reads, then rises 1 J a read.
type stepMeter struct {
	zero, reads int
}

func (m *stepMeter) Name() string    { return "step" }
func (m *stepMeter) Estimated() bool { return false }
func (m *stepMeter) Read(_ context.Context) ([]reading.ZoneSample, error) {
	m.reads++
	j := float64(max(0, m.reads-m.zero))
	return []reading.ZoneSample{{Zone: reading.ZonePackage, Socket: 0, Joules: 0}, {Zone: reading.ZoneDRAM, Socket: 0, Joules: j}}, nil
}

func TestMustAdvance(t *testing.T) {
	ctx := context.Background()
	// One zone that moves is enough, after a few reads of nothing.
	m := &stepMeter{zero: 3}
	if err := mustAdvance(ctx, m, time.Second, time.Millisecond); err != nil {
		t.Fatalf("a counter that moves on its 4th read refused: %v", err)
	}
	if m.reads != 4 {
		t.Errorf("%d reads, want 4: stop at the first that moved", m.reads)
	}
	// A PMU whose events count nothing (this machine's hypervisor:
	// perf stat -e power/energy-psys/ reads 0.00 Joules) is refused.
	dead := &stepMeter{zero: 1 << 30}
	start := time.Now()
	err := mustAdvance(ctx, dead, 60*time.Millisecond, 5*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not advance") {
		t.Fatalf("counters stuck at 0 J: err %v", err)
	}
	if el := time.Since(start); el < 60*time.Millisecond || el > 2*time.Second {
		t.Errorf("refused after %s, want the 60ms window", el)
	}
	if dead.reads < 3 {
		t.Errorf("%d reads in the window, want it polled", dead.reads)
	}
}

// This machine's hypervisor exposes a power PMU whose events count 0 J.
// The first discovery with a verdict directory waits out the check and
// writes down that the counters stalled; a second process of the same
// boot skips the check (and its 250 ms) and says why. Without the
// directory nothing is written.
func TestStalledPMURememberedForTheBoot(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := os.Stat("/sys/bus/event_source/devices/power/type"); err != nil {
		testenv.NotApplicable(t, "no power PMU on this machine")
	}
	dir := t.TempDir()
	cfg := Config{Source: "auto", IPMI: "off", LookPath: noTools, VerdictDir: dir,
		Interval: 20 * time.Millisecond, Timeout: 20 * time.Millisecond}
	start := time.Now()
	_, lines, _ := discoverWith(t, cfg)
	first := time.Since(start)
	note := func(lines []string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, "rapl-perf:") {
				return l
			}
		}
		return ""
	}
	if !strings.Contains(note(lines), "did not advance") {
		testenv.NotApplicable(t, "the power PMU counts energy here (%q): nothing to remember", note(lines))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "perf-rapl-stalled-*"))
	if len(files) != 1 || first < advanceWindow {
		t.Fatalf("verdicts %v after a %v discovery", files, first)
	}
	_, lines, _ = discoverWith(t, cfg)
	if n := note(lines); !strings.Contains(n, "found earlier this boot") || !strings.Contains(n, "did not advance") {
		t.Errorf("second discovery: %q", n)
	}
	cfg.VerdictDir = ""
	if _, lines, _ = discoverWith(t, cfg); strings.Contains(note(lines), "earlier this boot") {
		t.Errorf("without a verdict directory: %q", note(lines))
	}
}
