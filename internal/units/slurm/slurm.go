// Package slurm reads Slurm job metadata (user, account, partition, nodes,
// state, times, allocation, exit code) from slurmrestd's accounting API
// (Slurm 22.05: /slurmdb/v0.0.38/jobs, JWT auth) or, without it, from
// sacct, and hands it to the units store. Figures never come from here:
// they are the TSDB's (internal/units/updater).
//
// Both are read at a slow interval (15 min by default), incrementally:
// each read asks for the jobs active since the previous one (minus a
// minute of skew), so slurmdbd is never polled at a scrape's pace.
package slurm

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/units/feed"
)

// CursorName is the store cursor of the Slurm feeder.
const CursorName = "slurm"

// NewFeeder reads src into st every interval; the first read goes
// lookback back.
func NewFeeder(src feed.Source, st feed.Store, interval, lookback time.Duration, log *zap.Logger) *feed.Feeder {
	return feed.New(src, st, feed.Config{Scheduler: "Slurm", Cursor: CursorName, Interval: interval, Lookback: lookback}, log)
}

// state strips what follows the state's name ("CANCELLED by 1001").
func state(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, ' '); i > 0 {
		s = s[:i]
	}
	return s
}

// exitCode turns Slurm's "code:signal" into one code, 128+signal when a
// signal ended the job (as a shell reports it).
func exitCode(s string) (*int, error) {
	code, sig, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return nil, fmt.Errorf("exit code %q: want code:signal", s)
	}
	c, err := strconv.Atoi(code)
	if err != nil || c < 0 || c > 255 {
		return nil, fmt.Errorf("exit code %q: bad code", s)
	}
	g, err := strconv.Atoi(sig)
	if err != nil || g < 0 || g > 127 {
		return nil, fmt.Errorf("exit code %q: bad signal", s)
	}
	if g != 0 {
		c = 128 + g
	}
	return &c, nil
}

// ExpandNodes expands a Slurm hostlist ("node[01-03,7],gpu1") into names.
// It refuses lists of more than maxNodes names.
func ExpandNodes(list string) ([]string, error) {
	const maxNodes = 100000
	list = strings.TrimSpace(list)
	if list == "" || list == "None assigned" || list == "(null)" {
		return nil, nil
	}
	var out []string
	for len(list) > 0 {
		// One host expression: up to a comma outside brackets.
		depth, end := 0, len(list)
		for i, r := range list {
			if r == '[' {
				depth++
			} else if r == ']' {
				depth--
			} else if r == ',' && depth == 0 {
				end = i
				break
			}
		}
		expr := list[:end]
		list = strings.TrimPrefix(list[end:], ",")
		names, err := expandOne(expr, maxNodes-len(out))
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", expr, err)
		}
		out = append(out, names...)
	}
	return out, nil
}

func expandOne(expr string, budget int) ([]string, error) {
	open := strings.IndexByte(expr, '[')
	if open < 0 {
		return []string{expr}, nil
	}
	close := strings.IndexByte(expr[open:], ']')
	if close < 0 {
		return nil, fmt.Errorf("unclosed bracket")
	}
	close += open
	prefix, ranges, rest := expr[:open], expr[open+1:close], expr[close+1:]
	tails, err := expandOne(rest, budget)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(ranges, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || b < a || a < 0 {
			return nil, fmt.Errorf("bad range %q", r)
		}
		if (b-a+1)*len(tails) > budget-len(out) {
			return nil, fmt.Errorf("more than %d nodes", budget)
		}
		width := len(lo) // zero padding, as in node[01-10]
		for n := a; n <= b; n++ {
			for _, t := range tails {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, width, n, t))
			}
		}
	}
	return out, nil
}

// memBytes parses a memory size with Slurm's suffixes (K, M, G, T; M when
// none), as AllocTRES's mem=4G.
func memBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	mult := int64(1 << 20)
	switch s[len(s)-1] {
	case 'K', 'k':
		mult, s = 1<<10, s[:len(s)-1]
	case 'M', 'm':
		mult, s = 1<<20, s[:len(s)-1]
	case 'G', 'g':
		mult, s = 1<<30, s[:len(s)-1]
	case 'T', 't':
		mult, s = 1<<40, s[:len(s)-1]
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1e12 {
		return 0, fmt.Errorf("memory %q", s)
	}
	return int64(f * float64(mult)), nil
}

// isGPU reports whether a TRES name is a GPU ("gres/gpu", "gres/gpu:a100"
// or, from slurmrestd, type gres with name gpu[:model]).
func isGPU(name string) bool {
	name = strings.TrimPrefix(name, "gres/")
	return name == "gpu" || strings.HasPrefix(name, "gpu:")
}
