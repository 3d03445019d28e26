package measure

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/wattrace/wattrace/internal/testenv"
)

// The test binary is also measure's helper, a `wattrace measure` (for
// tests that need measure as a process of its own) and a CPU burner.
const (
	envMain = "WATTRACE_MEASURE_TEST_MAIN"
	envBurn = "WATTRACE_MEASURE_TEST_BURN"
	// envTTY prints whether a SIGINT would have come from the terminal.
	envTTY = "WATTRACE_MEASURE_TEST_TTY"
)

func TestMain(m *testing.M) {
	// Nothing kept in the host's BPF file system unless a test asks.
	DefaultKeep = ""
	switch {
	case IsHelper():
		os.Exit(Helper(os.Args[2:]))
	case os.Getenv(envMain) != "":
		_ = os.Unsetenv(envMain)
		os.Exit(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, []string{"measure"}))
	case os.Getenv(envTTY) != "":
		fmt.Println(ttyDelivered(syscall.SIGINT))
		os.Exit(0)
	case os.Getenv(envBurn) != "":
		secs, _ := strconv.ParseFloat(os.Getenv(envBurn), 64)
		burn(secs)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// burn spins until this process has used secs of CPU.
func burn(secs float64) {
	x := 1.0
	for {
		for i := 0; i < 1e6; i++ {
			x = x*1.0000001 + 1e-9
		}
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		if tv(ru.Utime)+tv(ru.Stime) >= secs {
			if x == 0 {
				fmt.Println(x)
			}
			return
		}
	}
}

// burner is argv that burns secs of CPU (this test binary).
func burner(t testing.TB, secs float64) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"env", envBurn + "=" + strconv.FormatFloat(secs, 'f', -1, 64), self}
}

// fixturePower is a fixture RAPL tree (--path.sysfs) whose package
// counter a goroutine advances as a CPU would: wattsPerCPU for each busy
// CPU of the node, read from /proc/stat every 5 ms, and nothing at idle.
// So the dynamic energy of any interval is wattsPerCPU × the node's busy
// CPU seconds in it, and a command's fair share is wattsPerCPU × its own.
// Tests of the CPU's energy pass --gpu=off with it: on a host with a real
// GPU (NVML finds the driver's device whatever the sysfs root), the GPU's
// energy would join the node's and the fixture's figures would not hold.
func fixturePower(t *testing.T, wattsPerCPU float64) string {
	t.Helper()
	root := testenv.CopyFixture(t, "../../pkg/power/testdata/rapl-1socket")
	advance(t, wattsPerCPU, map[string]func(st procfs.Stat) float64{
		filepath.Join(root, "class/powercap/intel-rapl:0/energy_uj"): func(st procfs.Stat) float64 { return busyOf(st.CPUTotal) },
	})
	return root
}

// fixture2Sockets is a two-socket fixture: CPU 0 is socket 0, CPU 1 is
// socket 1 (sysfs topology written here), and each package counter
// advances by wattsPerCPU × its own CPU's busy time.
func fixture2Sockets(t *testing.T, wattsPerCPU float64) string {
	t.Helper()
	root := testenv.CopyFixture(t, "../../pkg/power/testdata/rapl-2socket")
	for cpu := 0; cpu < 2; cpu++ {
		dir := filepath.Join(root, "devices/system/cpu", "cpu"+strconv.Itoa(cpu), "topology")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "physical_package_id"), []byte(strconv.Itoa(cpu)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "devices/system/cpu/online"), []byte("0-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := map[string]func(st procfs.Stat) float64{}
	for cpu := 0; cpu < 2; cpu++ {
		files[filepath.Join(root, "class/powercap/intel-rapl:"+strconv.Itoa(cpu)+"/energy_uj")] = func(st procfs.Stat) float64 {
			return busyOf(st.CPU[int64(cpu)])
		}
	}
	advance(t, wattsPerCPU, files)
	return root
}

func busyOf(c procfs.CPUStat) float64 {
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ
}

// advance runs, until the test ends, a goroutine that adds to each
// energy_uj file wattsPerCPU × the growth of its busy figure.
func advance(t *testing.T, wattsPerCPU float64, files map[string]func(procfs.Stat) float64) {
	t.Helper()
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	type counter struct {
		file string
		busy func(procfs.Stat) float64
		uj   float64
		prev float64
	}
	st, err := fs.Stat()
	if err != nil {
		t.Fatal(err)
	}
	var cs []*counter
	for f, busy := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		uj, err := strconv.ParseFloat(string(bytes.TrimSpace(b)), 64)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, &counter{file: f, busy: busy, uj: uj, prev: busy(st)})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			st, err := fs.Stat()
			if err != nil {
				t.Error(err)
				return
			}
			for _, c := range cs {
				now := c.busy(st)
				c.uj += wattsPerCPU * (now - c.prev) * 1e6
				c.prev = now
				// Renamed into place: a reader never sees a half-written file.
				tmp := c.file + ".tmp"
				if err := os.WriteFile(tmp, []byte(strconv.FormatFloat(c.uj, 'f', 0, 64)+"\n"), 0o644); err == nil {
					_ = os.Rename(tmp, c.file)
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// runMain runs Main in this process and returns its status, stdout and
// stderr.
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, bytes.NewReader(nil), &out, &errb, []string{"measure"})
	return code, out.String(), errb.String()
}
