package reading

import (
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// logEvery bounds the warnings per source and reason: a meter that glitches
// every second must not flood the log, yet an operator must see it.
const logEvery = time.Minute

// Rejects counts a source's rejected readings by reason and logs them at
// warn, at most once per reason per minute. It is safe for concurrent use.
type Rejects struct {
	source string
	log    *zap.Logger
	now    func() time.Time

	mu     sync.Mutex
	counts map[Reason]uint64
	logged map[Reason]time.Time
}

// NewRejects returns the tally of one source ("rapl", "redfish", ...). A nil
// logger logs nothing.
func NewRejects(source string, log *zap.Logger) *Rejects {
	if log == nil {
		log = zap.NewNop()
	}
	return &Rejects{source: source, log: log, now: time.Now,
		counts: map[Reason]uint64{}, logged: map[Reason]time.Time{}}
}

// Add counts err if it is (or wraps) a *Rejection and reports whether it
// was one; other errors are the caller's to handle. what names the reading
// (a zone, a file) in the log line.
func (r *Rejects) Add(err error, what string) bool {
	var rej *Rejection
	if !errors.As(err, &rej) {
		return false
	}
	r.mu.Lock()
	r.counts[rej.Reason]++
	n := r.counts[rej.Reason]
	now := r.now()
	last, ok := r.logged[rej.Reason]
	speak := !ok || now.Sub(last) >= logEvery
	if speak {
		r.logged[rej.Reason] = now
	}
	r.mu.Unlock()
	if speak {
		r.log.Warn("rejected reading, not credited", zap.String("source", r.source), zap.String("reading", what),
			zap.String("reason", string(rej.Reason)), zap.Float64("value", rej.Value), zap.String("detail", rej.Detail),
			zap.Uint64("rejected_total", n))
	}
	return true
}

// Source is the name the tally was made for.
func (r *Rejects) Source() string { return r.source }

// Counts returns the rejections so far by reason (a copy).
func (r *Rejects) Counts() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]uint64, len(r.counts))
	for k, v := range r.counts {
		out[string(k)] = v
	}
	return out
}
