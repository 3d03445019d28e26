package profiling

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wattrace/wattrace/internal/procpid"
)

// DefaultEnvVar is the environment variable that opts a process in when
// no other is configured.
const DefaultEnvVar = "WATTRACE_PROFILE"

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
		if val, ok := procpid.LookupEnviron(environ, v); ok && val != "" {
			return v, true
		}
	}
	return "", false
}

// MatchPID reads <procfs>/<pid>/environ and reports whether the process
// opted in. A process that has exited returns an error for which
// procpid.Vanished is true; kernel threads and zombies have an empty environment and never
// match.
func (f *Filter) MatchPID(procfs string, pid int) (bool, error) {
	ok, _, err := f.matchPID(procfs, pid)
	return ok, err
}

// matchPID is MatchPID that also says whether the environment was empty,
// as it reads for kernel threads and for a process in the middle of exec.
func (f *Filter) matchPID(procfs string, pid int) (ok, empty bool, err error) {
	b, err := procpid.ReadEnviron(procfs, pid)
	if err != nil {
		return false, false, err
	}
	_, ok = f.Match(b)
	return ok, len(b) == 0, nil
}
