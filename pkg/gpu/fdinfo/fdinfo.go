// Package fdinfo reads the kernel's DRM client usage statistics from
// /proc/PID/fdinfo/* (Documentation/gpu/drm-usage-stats.rst) and turns
// them into per-process GPU usage per device and interval.
//
// Each open DRM file is a client with a drm-client-id unique per device
// (drm-pdev); the same client appears under every fd and process that
// shares the open file (dup, fork, SCM_RIGHTS), so clients are deduplicated
// by (drm-pdev, drm-client-id) and credited to the lowest pid holding them.
// Busy time comes as drm-engine-<class> nanoseconds (amdgpu, i915, msm, …)
// or, on xe, as drm-cycles-<class> GPU timestamp cycles with
// drm-total-cycles-<class> the cycles elapsed.
package fdinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Client is one DRM client's cumulative counters.
type Client struct {
	PID  int
	ID   uint64
	PDev string // PCI address, as in drm-pdev
	// Driver is drm-driver ("amdgpu", "i915", "xe").
	Driver string
	// Busy is busy nanoseconds per engine class (drm-engine-<class>).
	Busy map[string]uint64
	// Capacity is drm-engine-capacity-<class> (engines of the class), 1
	// when absent.
	Capacity map[string]uint64
	// Cycles and TotalCycles are xe's drm-cycles-<class> and
	// drm-total-cycles-<class>.
	Cycles, TotalCycles map[string]uint64
}

// ClientKey identifies a client on a device.
type ClientKey struct {
	PDev string
	ID   uint64
}

// Scan reads every process's DRM clients under procRoot. Only fds that are
// DRM device files (/dev/dri/*) are opened, so the cost is a readlink per
// open fd on the node and a read per GPU client. Processes that vanish or
// that cannot be read are skipped: they are not an error of the scan.
func Scan(procRoot string) (map[ClientKey]*Client, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("fdinfo: %w", err)
	}
	out := map[ClientKey]*Client{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		fdDir := filepath.Join(procRoot, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || !strings.HasPrefix(target, "/dev/dri/") {
				continue
			}
			buf, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "fdinfo", fd.Name()))
			if err != nil {
				continue
			}
			c, ok := Parse(buf)
			if !ok {
				continue
			}
			c.PID = pid
			k := ClientKey{c.PDev, c.ID}
			if old, ok := out[k]; ok && old.PID <= pid {
				continue // shared file: credited to the lowest pid
			}
			out[k] = c
		}
	}
	return out, nil
}

// Parse reads one fdinfo file. It reports false when the file is not a DRM
// client with a pdev and a client id (other drivers' or non-DRM files).
func Parse(b []byte) (*Client, bool) {
	c := &Client{}
	var haveID bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(key, "drm-") {
			continue
		}
		val = strings.TrimSpace(val)
		switch {
		case key == "drm-driver":
			c.Driver = val
		case key == "drm-pdev":
			c.PDev = strings.ToLower(val)
		case key == "drm-client-id":
			id, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return nil, false
			}
			c.ID, haveID = id, true
		case strings.HasPrefix(key, "drm-engine-capacity-"):
			if n, err := strconv.ParseUint(val, 10, 64); err == nil && n > 0 {
				set(&c.Capacity, strings.TrimPrefix(key, "drm-engine-capacity-"), n)
			}
		case strings.HasPrefix(key, "drm-engine-"):
			if n, ok := number(val, "ns"); ok {
				set(&c.Busy, strings.TrimPrefix(key, "drm-engine-"), n)
			}
		case strings.HasPrefix(key, "drm-total-cycles-"):
			if n, ok := number(val, ""); ok {
				set(&c.TotalCycles, strings.TrimPrefix(key, "drm-total-cycles-"), n)
			}
		case strings.HasPrefix(key, "drm-cycles-"):
			if n, ok := number(val, ""); ok {
				set(&c.Cycles, strings.TrimPrefix(key, "drm-cycles-"), n)
			}
		}
	}
	if !haveID || c.PDev == "" {
		return nil, false
	}
	return c, true
}

func set(m *map[string]uint64, k string, v uint64) {
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[k] = v
}

// number parses "<n> <unit>" (or a bare n when unit is "").
func number(v, unit string) (uint64, bool) {
	f := strings.Fields(v)
	if len(f) == 0 || (unit != "" && len(f) > 1 && f[1] != unit) {
		return 0, false
	}
	n, err := strconv.ParseUint(f[0], 10, 64)
	return n, err == nil
}
