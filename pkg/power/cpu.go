package power

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// maxCPUListLen bounds how many CPUs a cpu list may expand to. Linux caps
// NR_CPUS at 8192 today; the headroom is generous, the bound exists so a
// corrupt or hostile "0-4294967295" cannot make us allocate gigabytes.
const maxCPUListLen = 1 << 16

// CPUModel returns the "model name" field of <procfsRoot>/cpuinfo, the
// string LookupCoefficients matches against.
//
// arm64 kernels print no "model name"; there the CPU is identified by its
// MIDR fields, and CPUModel returns "ARM implementer 0x41 part 0xd0c" built
// from "CPU implementer" and "CPU part" so the coefficient table can still
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
// per-vCPU coefficients apply to CPUs that can actually draw power.
func OnlineCPUs(sysfsRoot string) (int, error) {
	path := filepath.Join(sysfsRoot, "devices", "system", "cpu", "online")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	cpus, err := parseCPUList(string(b))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	if len(cpus) == 0 {
		return 0, fmt.Errorf("parse %s: no CPUs listed", path)
	}
	return len(cpus), nil
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

// parseCPUList parses the kernel's cpu list format ("0-3,5,7-8", as in
// devices/system/cpu/online) into a sorted list of distinct CPU numbers.
// Surrounding whitespace (the trailing newline) is ignored; an empty list
// is valid and yields no CPUs.
func parseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	seen := make(map[int]struct{})
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := parseCPUNumber(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", truncate(s), err)
		}
		last := first
		if isRange {
			if last, err = parseCPUNumber(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", truncate(s), err)
			}
			if last < first {
				return nil, fmt.Errorf("cpu list %q: descending range %q", truncate(s), part)
			}
		}
		if last-first >= maxCPUListLen || len(seen)+(last-first+1) > maxCPUListLen {
			return nil, fmt.Errorf("cpu list %q: more than %d CPUs", truncate(s), maxCPUListLen)
		}
		for c := first; c <= last; c++ {
			seen[c] = struct{}{}
		}
	}
	cpus := make([]int, 0, len(seen))
	for c := range seen {
		cpus = append(cpus, c)
	}
	sort.Ints(cpus)
	return cpus, nil
}

// parseCPUNumber accepts plain non-negative decimal only: strconv.Atoi
// would also take "+3", which the kernel never writes.
func parseCPUNumber(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("invalid cpu number %q", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("invalid cpu number %q: %w", s, err)
	}
	return n, nil
}

// truncate keeps error messages readable when a file holds garbage.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
