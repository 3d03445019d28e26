package power

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestCPUModel(t *testing.T) {
	got, err := CPUModel(filepath.Join("testdata", "node-2socket", "proc"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"; got != want {
		t.Fatalf("CPUModel = %q, want %q", got, want)
	}

	got, err = CPUModel(filepath.Join("testdata", "cpuinfo-arm64"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ARM implementer 0x41 part 0xd0c"; got != want {
		t.Fatalf("arm64 CPUModel = %q, want %q", got, want)
	}

	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cpuinfo"), "processor\t: 0\nflags\t: fpu\n")
	if _, err := CPUModel(dir); err == nil || !strings.Contains(err.Error(), "model name") {
		t.Fatalf("no model name: err = %v", err)
	}
	if _, err := CPUModel(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing cpuinfo: err = %v, want ErrNotExist", err)
	}
}

func TestOnlineCPUs(t *testing.T) {
	n, err := OnlineCPUs(filepath.Join("testdata", "node-2socket", "sys"))
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 { // "0-3,5"
		t.Fatalf("OnlineCPUs = %d, want 5", n)
	}

	root := t.TempDir()
	dir := filepath.Join(root, "devices", "system", "cpu")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "online")
	writeFile(t, path, "0-x\n")
	if _, err := OnlineCPUs(root); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"0-x"`) {
		t.Fatalf("malformed online: err = %v, want path and content", err)
	}
	writeFile(t, path, "\n")
	if _, err := OnlineCPUs(root); err == nil {
		t.Fatal("empty online list accepted")
	}
}

func TestCPUSockets(t *testing.T) {
	got, err := CPUSockets(filepath.Join("testdata", "node-2socket", "sys"))
	if err != nil {
		t.Fatal(err)
	}
	// cpu4 is offline (no topology/), cpufreq and cpuidle are not CPUs.
	want := map[int]int{0: 0, 1: 0, 2: 1, 3: 1, 5: 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CPUSockets = %v, want %v", got, want)
	}

	root := copyFixture(t, "node-2socket")
	path := filepath.Join(root, "sys", "devices", "system", "cpu", "cpu2", "topology", "physical_package_id")
	writeFile(t, path, "one\n")
	if _, err := CPUSockets(filepath.Join(root, "sys")); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"one"`) {
		t.Fatalf("malformed package id: err = %v", err)
	}
	if _, err := CPUSockets(t.TempDir()); err == nil {
		t.Fatal("CPUSockets on empty sysfs succeeded")
	}
}
