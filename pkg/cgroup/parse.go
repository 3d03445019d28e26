package cgroup

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// ProcCgroupPath returns the path, relative to the root of hierarchy k, of
// the cgroup a /proc/PID/cgroup file places the process in. Each line of that
// file is "hierarchy-id:controller,list:path"; for V2 the line is "0::path",
// for v1 it is the line whose controller list contains k (so a comounted
// "cpu,cpuacct" hierarchy matches both CPU and CPUAcct). It returns false
// when there is no such line or its path is not absolute. A path containing
// ".." is also rejected: the kernel writes it for a cgroup outside the
// reader's cgroup namespace, which this namespace cannot name.
func ProcCgroupPath(data []byte, k Kind) (string, bool) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		id, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		ctrls, path, ok := bytes.Cut(rest, []byte(":"))
		if !ok {
			continue
		}
		if k == V2 {
			if string(id) != "0" || len(ctrls) != 0 {
				continue
			}
		} else if !hasController(ctrls, string(k)) {
			continue
		}
		return validPath(string(path))
	}
	return "", false
}

func hasController(list []byte, c string) bool {
	for len(list) > 0 {
		name := list
		if i := bytes.IndexByte(list, ','); i >= 0 {
			name, list = list[:i], list[i+1:]
		} else {
			list = nil
		}
		if string(name) == c {
			return true
		}
	}
	return false
}

func validPath(p string) (string, bool) {
	if !strings.HasPrefix(p, "/") {
		return "", false
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return "", false
		}
	}
	return p, true
}

// parseCPUStatUsage returns usage_usec from a cgroup2 cpu.stat file.
func parseCPUStatUsage(data []byte) (uint64, error) {
	for line := range strings.SplitSeq(string(data), "\n") {
		key, val, ok := strings.Cut(line, " ")
		if !ok || key != "usage_usec" {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("usage_usec: %w", err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("no usage_usec line")
}

// parseUint reads a file holding one decimal number, like cpuacct.usage.
func parseUint(data []byte) (uint64, error) {
	return strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
}
