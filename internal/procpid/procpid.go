// Package procpid reads what the exporter needs of /proc/PID beyond
// counters: a process's environment (the profiling opt-in, Slurm's GPU
// variables), and whether a read failed because the process is gone, which
// every scan of /proc meets and none should report.
package procpid

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// ReadEnviron returns the raw contents of <procRoot>/<pid>/environ. Kernel
// threads and zombies read empty. Errors keep their cause: Vanished tells a
// process that exited, fs.ErrPermission another user's process read
// without CAP_SYS_PTRACE.
func ReadEnviron(procRoot string, pid int) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "environ"))
	if err != nil {
		return nil, fmt.Errorf("read environment of pid %d: %w", pid, err)
	}
	return b, nil
}

// ParseEnviron parses the contents of /proc/PID/environ: NUL-separated
// KEY=value entries, the last one optionally NUL-terminated. The key ends at
// the first '='; entries without '=' or with an empty key are skipped (the
// kernel hands over whatever execve got, and nothing enforces the
// convention). When a key repeats, the first entry wins, as with glibc's
// getenv, so the result is what the process itself sees.
func ParseEnviron(b []byte) map[string]string {
	env := make(map[string]string)
	for len(b) > 0 {
		var entry []byte
		entry, b = nextEntry(b)
		k, v, ok := bytes.Cut(entry, []byte{'='})
		if !ok || len(k) == 0 {
			continue
		}
		if _, dup := env[string(k)]; !dup {
			env[string(k)] = string(v)
		}
	}
	return env
}

// LookupEnviron returns the value of key in environ data as ParseEnviron
// would, without building the map: opt-in checks run on every new process,
// and most environments do not carry the variable.
func LookupEnviron(b []byte, key string) (string, bool) {
	if key == "" {
		return "", false
	}
	for len(b) > 0 {
		var entry []byte
		entry, b = nextEntry(b)
		if len(entry) > len(key) && entry[len(key)] == '=' && string(entry[:len(key)]) == key {
			return string(entry[len(key)+1:]), true
		}
	}
	return "", false
}

// nextEntry splits off the first NUL-terminated entry.
func nextEntry(b []byte) (entry, rest []byte) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// Vanished reports whether err means the process or thread exited while it
// was read: its /proc directory is gone (ENOENT) or it is past reading
// (ESRCH, between open and read).
func Vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}
