package profiling

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultEnvVar is the environment variable that opts a process in when
// no other is configured.
const DefaultEnvVar = "WATTRACE_PROFILE"

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

// Filter decides which processes asked to be profiled: those whose
// environment sets one of its variables to a non-empty value. An empty
// value does not opt in, so `WATTRACE_PROFILE= cmd` switches profiling off
// for cmd under a parent that set it. The filter holds no state, so the
// profiler and the Alloy target handler can share one.
type Filter struct {
	vars []string
}

// NewFilter builds a filter for the given variable names. A name may not be
// empty or contain '=' or NUL: such a name could never match an entry, and
// a filter that silently selects nothing is a configuration error.
func NewFilter(vars []string) (*Filter, error) {
	if len(vars) == 0 {
		return nil, errors.New("profiling: no opt-in environment variable configured")
	}
	f := &Filter{}
	seen := make(map[string]bool)
	for _, v := range vars {
		if v == "" || strings.ContainsAny(v, "=\x00") {
			return nil, fmt.Errorf("profiling: invalid environment variable name %q: must be non-empty without '=' or NUL", v)
		}
		if !seen[v] {
			seen[v] = true
			f.vars = append(f.vars, v)
		}
	}
	return f, nil
}

// Vars returns the variable names the filter looks for.
func (f *Filter) Vars() []string { return append([]string(nil), f.vars...) }

// Match reports whether environ data opts in, and by which variable.
func (f *Filter) Match(environ []byte) (string, bool) {
	for _, v := range f.vars {
		if val, ok := LookupEnviron(environ, v); ok && val != "" {
			return v, true
		}
	}
	return "", false
}

// MatchPID reads <procfs>/<pid>/environ and reports whether the process
// opted in. A process that has exited returns an error for which Gone is
// true; kernel threads and zombies have an empty environment and never
// match.
func (f *Filter) MatchPID(procfs string, pid int) (bool, error) {
	ok, _, err := f.matchPID(procfs, pid)
	return ok, err
}

// matchPID is MatchPID that also says whether the environment was empty,
// as it reads for kernel threads and for a process in the middle of exec.
func (f *Filter) matchPID(procfs string, pid int) (ok, empty bool, err error) {
	b, err := os.ReadFile(filepath.Join(procfs, strconv.Itoa(pid), "environ"))
	if err != nil {
		return false, false, fmt.Errorf("read environment of pid %d: %w", pid, err)
	}
	_, ok = f.Match(b)
	return ok, len(b) == 0, nil
}

// Gone reports whether err means the process or thread no longer exists:
// its /proc directory is gone (ENOENT) or it exited between open and read
// (ESRCH).
func Gone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}
