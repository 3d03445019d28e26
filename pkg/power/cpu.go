package power

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/wattrace/wattrace/internal/cpulist"
	"go.uber.org/zap"
)

// CPUModel returns the "model name" field of <procfsRoot>/cpuinfo, the
// string the estimator's curves (pkg/power/curves) look up.
//
// arm64 kernels print no "model name"; there the CPU is identified by its
// MIDR fields, and CPUModel returns "ARM implementer 0x41 part 0xd0c" built
// from "CPU implementer" and "CPU part" so the architecture table can still
// match (e.g. Neoverse N1 = Graviton2).
func CPUModel(procfsRoot string) (string, error) {
	path := filepath.Join(procfsRoot, "cpuinfo")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	var implementer, part string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "model name":
			if val != "" {
				return val, nil
			}
		case "CPU implementer":
			if implementer == "" {
				implementer = val
			}
		case "CPU part":
			if part == "" {
				part = val
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("scan %s: %w", path, err)
	}
	if implementer != "" && part != "" {
		return "ARM implementer " + implementer + " part " + part, nil
	}
	return "", fmt.Errorf("%s: no \"model name\" (or arm64 \"CPU implementer\"/\"CPU part\") field", path)
}

// OnlineCPUs returns how many CPUs <sysfsRoot>/devices/system/cpu/online
// lists. It counts online CPUs, not possible ones, because the estimator's
// per-CPU figures apply to CPUs that can actually draw power.
func OnlineCPUs(sysfsRoot string) (int, error) {
	path := filepath.Join(sysfsRoot, "devices", "system", "cpu", "online")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	cpus, err := cpulist.Parse(string(b))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	if len(cpus) == 0 {
		return 0, fmt.Errorf("parse %s: no CPUs listed", path)
	}
	return len(cpus), nil
}

// CPUCount is OnlineCPUs, or the CPUs this process may run on where sysfs
// doesn't say (logged at warn). The exporter reads it once and hands it to
// every part that scales by it.
func CPUCount(sysfsRoot string, log *zap.Logger) int {
	cpus, err := OnlineCPUs(sysfsRoot)
	if err != nil || cpus <= 0 {
		cpus = runtime.NumCPU()
		if log != nil {
			log.Warn("online CPUs unavailable; using the CPUs this process may run on", zap.Int("cpus", cpus), zap.Error(err))
		}
	}
	return cpus
}

// CPUSockets maps each CPU number to its physical_package_id, read from
// <sysfsRoot>/devices/system/cpu/cpuN/topology/physical_package_id. CPUs
// without a topology directory (offline CPUs on most kernels) are omitted.
func CPUSockets(sysfsRoot string) (map[int]int, error) {
	dir := filepath.Join(sysfsRoot, "devices", "system", "cpu")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	sockets := make(map[int]int)
	for _, e := range entries {
		num, ok := strings.CutPrefix(e.Name(), "cpu")
		if !ok {
			continue
		}
		cpu, err := strconv.Atoi(num)
		if err != nil || cpu < 0 {
			continue // cpufreq, cpuidle, ... share the prefix
		}
		path := filepath.Join(dir, e.Name(), "topology", "physical_package_id")
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		s := strings.TrimSpace(string(b))
		// -1 is legitimate: some arm64 firmware reports no package id.
		pkg, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("parse %s: invalid package id %q", path, truncate(s))
		}
		sockets[cpu] = pkg
	}
	if len(sockets) == 0 {
		return nil, fmt.Errorf("%s: no cpuN/topology/physical_package_id files", dir)
	}
	return sockets, nil
}

// truncate keeps error messages readable when a file holds garbage.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}

// MemoryGiB returns MemTotal from <procfsRoot>/meminfo in GiB: the memory
// the kernel manages, a little below what is installed.
func MemoryGiB(procfsRoot string) (float64, error) {
	path := filepath.Join(procfsRoot, "meminfo")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(key) != "MemTotal" {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("parse %s: MemTotal %q: want \"N kB\"", path, truncate(strings.TrimSpace(val)))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || kb == 0 || kb > 1<<50 {
			return 0, fmt.Errorf("parse %s: MemTotal %q: not a memory size", path, truncate(f[0]))
		}
		return float64(kb) / (1 << 20), nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("scan %s: %w", path, err)
	}
	return 0, fmt.Errorf("%s: no MemTotal line", path)
}

// Virtualized reports whether the node is a virtual machine: x86 guests
// have the "hypervisor" CPU flag (CPUID leaf 1, ECX bit 31, which every
// mainstream hypervisor sets), and the DMI product or vendor of KVM, QEMU,
// VMware, VirtualBox, Hyper-V and Xen guests names them (arm64 guests
// have no flag). why says which it was.
func Virtualized(procfsRoot, sysfsRoot string) (bool, string) {
	if b, err := os.ReadFile(filepath.Join(procfsRoot, "cpuinfo")); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			key, val, ok := strings.Cut(sc.Text(), ":")
			if !ok || strings.TrimSpace(key) != "flags" {
				continue
			}
			for _, f := range strings.Fields(val) {
				if f == "hypervisor" {
					return true, "cpuinfo flag hypervisor"
				}
			}
			break
		}
	}
	for _, name := range []string{"sys_vendor", "product_name"} {
		b, err := os.ReadFile(filepath.Join(sysfsRoot, "class", "dmi", "id", name))
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		for _, vm := range []string{"QEMU", "KVM", "VMware", "VirtualBox", "Virtual Machine", "Xen", "Bochs"} {
			if strings.Contains(v, vm) {
				return true, "DMI " + name + " " + strconv.Quote(truncate(v))
			}
		}
	}
	return false, ""
}
