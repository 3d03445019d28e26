package stats

// shares is the stage that holds what each consumer used in the current
// interval, the figures a zone's energy is split by: CPU seconds per
// socket (cgroups and processes apart: each hierarchy sums to the node on
// its own) and the perf counters' events.
type shares struct {
	nsockets int
	sockets  map[int]int // CPU → socket
	// cg and proc are CPU seconds by socket.
	cg, proc map[int]map[*consumer]float64
	// cgTotal is the cgroups' CPU seconds over all sockets; procTotal the
	// processes', summed on demand.
	cgTotal, procTotal map[*consumer]float64
	// cgCounter and procCounter are each perf counter's events, by name.
	cgCounter, procCounter map[string]map[*consumer]float64
}

func newShares(sockets map[int]int) *shares {
	n := map[int]bool{}
	for _, s := range sockets {
		n[s] = true
	}
	return &shares{
		nsockets: max(1, len(n)), sockets: sockets,
		cg: map[int]map[*consumer]float64{}, proc: map[int]map[*consumer]float64{},
		cgTotal: map[*consumer]float64{}, procTotal: map[*consumer]float64{},
		cgCounter: map[string]map[*consumer]float64{}, procCounter: map[string]map[*consumer]float64{},
	}
}

// clear forgets the previous interval's usage.
func (u *shares) clear() {
	for _, m := range u.cgCounter {
		clear(m)
	}
	for _, m := range u.procCounter {
		clear(m)
	}
	for _, m := range u.cg {
		clear(m)
	}
	for _, m := range u.proc {
		clear(m)
	}
	clear(u.cgTotal)
}

// spread places a cgroup's usage on sockets in proportion to where its
// processes ran; with one socket, or nothing to go by, evenly.
func (u *shares) spread(w *consumer, sec float64, bySocket map[int]float64) {
	if u.nsockets == 1 {
		u.at(u.cg, 0)[w] += sec
		return
	}
	var sum float64
	for _, v := range bySocket {
		sum += v
	}
	if sum == 0 {
		for s := 0; s < u.nsockets; s++ {
			u.at(u.cg, s)[w] += sec / float64(u.nsockets)
		}
		return
	}
	for s, v := range bySocket {
		u.at(u.cg, s)[w] += sec * v / sum
	}
}

func (u *shares) at(m map[int]map[*consumer]float64, socket int) map[*consumer]float64 {
	v := m[socket]
	if v == nil {
		v = map[*consumer]float64{}
		m[socket] = v
	}
	return v
}

func (u *shares) socketOf(cpu int) int {
	if u.nsockets == 1 || cpu < 0 {
		return 0
	}
	return u.sockets[cpu]
}

// cpu returns the CPU-time usage a zone on socket (-1: node-wide) is split
// by, for cgroups (cg) or processes.
func (u *shares) cpu(socket int, cg bool) map[*consumer]float64 {
	use := u.proc
	if cg {
		use = u.cg
	}
	switch {
	case socket >= 0 && u.nsockets > 1:
		return u.at(use, socket)
	case u.nsockets == 1:
		return u.at(use, 0)
	case cg:
		return u.cgTotal
	}
	// Node-wide zones on multi-socket nodes: usage summed over sockets.
	clear(u.procTotal)
	for _, m := range use {
		for w, v := range m {
			u.procTotal[w] += v
		}
	}
	return u.procTotal
}

// credit adds a consumer's perf counter events of this interval.
func (u *shares) credit(cg bool, w *consumer, counters []string, d []uint64) {
	use := u.procCounter
	if cg {
		use = u.cgCounter
	}
	for i, name := range counters {
		if i >= len(d) || d[i] == 0 {
			continue
		}
		m := use[name]
		if m == nil {
			m = map[*consumer]float64{}
			use[name] = m
		}
		m[w] += float64(d[i])
	}
}

// counter returns the usage by a perf counter's events (an empty map when
// none were counted this interval).
func (u *shares) counter(name string, cg bool) map[*consumer]float64 {
	m := u.procCounter[name]
	if cg {
		m = u.cgCounter[name]
	}
	if m == nil {
		m = map[*consumer]float64{}
	}
	return m
}
