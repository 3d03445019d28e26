package bpfloader

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
)

// The probes' logic, run through the raw_tp test entries with
// BPF_PROG_TEST_RUN against fresh maps, with exact expected contents.

// logicObjects are the test entries and the maps they write; loaded
// lazily, so the hooks are neither loaded nor attached.
type logicObjects struct {
	TestAccount *ebpf.Program `ebpf:"test_account"`
	TestRead    *ebpf.Program `ebpf:"test_read"`
	TestSoftirq *ebpf.Program `ebpf:"test_softirq"`
	TestNet     *ebpf.Program `ebpf:"test_net"`
	TestBio     *ebpf.Program `ebpf:"test_bio"`
	TestCounter *ebpf.Program `ebpf:"test_counter"`
	ProcStats   *ebpf.Map     `ebpf:"proc_stats"`
	CgroupStats *ebpf.Map     `ebpf:"cgroup_stats"`
	SoftirqNode *ebpf.Map     `ebpf:"softirq_node"`
}

func (o *logicObjects) close() {
	for _, p := range []*ebpf.Program{o.TestAccount, o.TestRead, o.TestSoftirq, o.TestNet, o.TestBio, o.TestCounter} {
		p.Close()
	}
	for _, m := range []*ebpf.Map{o.ProcStats, o.CgroupStats, o.SoftirqNode} {
		m.Close()
	}
}

func loadLogic(t *testing.T) *logicObjects {
	t.Helper()
	testenv.RequireRoot(t)
	spec, err := loadProbes()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Variables[probesVarPageShift].Set(uint32(12)); err != nil {
		t.Fatal(err)
	}
	var objs logicObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(objs.close)
	return &objs
}

func run(t *testing.T, p *ebpf.Program, args ...uint64) uint32 {
	t.Helper()
	ret, err := p.Run(&ebpf.RunOptions{Context: args})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret
}

type statsWant map[probesStatField]uint64

func checkStats(t *testing.T, what string, m *ebpf.Map, key any, want statsWant) {
	t.Helper()
	var s probesStats
	err := m.Lookup(key, &s)
	if want == nil {
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Errorf("%s: entry exists (%v), want none", what, s.V)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var exp [probesStatFieldSTAT_NR]uint64
	for f, v := range want {
		exp[f] = v
	}
	if s.V != exp {
		t.Errorf("%s:\n got %v\nwant %v", what, s.V, exp)
	}
}

func TestLogicAccount(t *testing.T) {
	o := loadLogic(t)
	run(t, o.TestAccount, 10, 20, 30, uint64(probesStatFieldSTAT_PC_ADDED), 5)
	run(t, o.TestAccount, 10, 20, 30, uint64(probesStatFieldSTAT_PC_ADDED), 7)
	run(t, o.TestAccount, 10, 20, 30, uint64(probesStatFieldSTAT_PC_DIRTIED), 3)
	// The idle task (tgid 0) counts for its cgroup only.
	run(t, o.TestAccount, 0, 0, 30, uint64(probesStatFieldSTAT_PC_DIRTIED), 1)
	// Out of range fields and zero values change nothing.
	run(t, o.TestAccount, 10, 20, 30, uint64(probesStatFieldSTAT_NR), 100)
	run(t, o.TestAccount, 11, 20, 31, uint64(probesStatFieldSTAT_PC_ADDED), 0)

	checkStats(t, "proc 10", o.ProcStats, probesProcKey{Tgid: 10, Start: 20}, statsWant{
		probesStatFieldSTAT_PC_ADDED: 12, probesStatFieldSTAT_PC_DIRTIED: 3})
	checkStats(t, "cgroup 30", o.CgroupStats, uint64(30), statsWant{
		probesStatFieldSTAT_PC_ADDED: 12, probesStatFieldSTAT_PC_DIRTIED: 4})
	checkStats(t, "proc 0", o.ProcStats, probesProcKey{}, nil)
	checkStats(t, "proc 11", o.ProcStats, probesProcKey{Tgid: 11, Start: 20}, nil)
	checkStats(t, "cgroup 31", o.CgroupStats, uint64(31), nil)
}

func TestLogicReadPages(t *testing.T) {
	o := loadLogic(t)
	const mapping, other = 0xffff888000001000, 0xffff888000002000
	const big = 1000 * 4096
	for _, c := range []struct {
		name                       string
		mapping, index, last, size uint64
		want                       uint32
	}{
		{"16-page read", mapping, 0, 15, big, 16},
		{"next read", mapping, 16, 31, big, 16},
		{"same range again is a new read", mapping, 16, 31, big, 16},
		{"1 MiB read", mapping, 0, 255, big, 256},
		{"its second batch", mapping, 31, 255, big, 0},
		{"its third batch", mapping, 62, 255, big, 0},
		{"next 1 MiB read", mapping, 256, 511, big, 256},
		{"another file, same range", other, 300, 511, big, 212},
		{"read reaching past the end", mapping, 996, 1200, big, 4},
		{"partial last page", mapping, 990, 1200, big + 100, 11},
		{"read at the end", mapping, 1000, 1200, big, 0},
		{"empty file", other, 0, 0, 0, 0},
		{"sub-page reads each count the page", mapping, 5, 5, big, 1},
		{"", mapping, 5, 5, big, 1},
	} {
		if got := run(t, o.TestRead, 10, 20, 30, c.mapping, c.index, c.last, c.size); got != c.want {
			t.Errorf("%s (%d..%d of %d bytes): %d pages, want %d", c.name, c.index, c.last, c.size, got, c.want)
		}
	}
	total := uint64(16 + 16 + 16 + 256 + 256 + 212 + 4 + 11 + 1 + 1)
	checkStats(t, "proc", o.ProcStats, probesProcKey{Tgid: 10, Start: 20}, statsWant{probesStatFieldSTAT_PC_ACCESSED: total})
	checkStats(t, "cgroup", o.CgroupStats, uint64(30), statsWant{probesStatFieldSTAT_PC_ACCESSED: total})
}

func TestLogicSoftirq(t *testing.T) {
	o := loadLogic(t)
	const netRX, timer = 3, 1
	for _, c := range []struct {
		name               string
		tgid, vec, in, out uint64
		want               uint32
	}{
		{"NET_RX, 500 ns", 10, netRX, 1000, 1500, 500},
		{"NET_RX, 250 ns", 10, netRX, 2000, 2250, 250},
		{"exit without its entry: counted, no time", 10, netRX, 0, 3000, 0},
		{"TIMER interrupting idle: node and cgroup only", 0, timer, 4000, 4100, 100},
		{"vector out of range: ignored", 10, 10, 5000, 5100, 0},
	} {
		if got := run(t, o.TestSoftirq, c.tgid, 20, 30, c.vec, c.in, c.out); got != c.want {
			t.Errorf("%s: %d ns, want %d", c.name, got, c.want)
		}
	}
	// An exit whose entry was of another vector gets no time.
	run(t, o.TestSoftirq, 10, 20, 30, timer, 6000, 0)
	if got := run(t, o.TestSoftirq, 10, 20, 30, netRX, 0, 6100); got != 0 {
		t.Errorf("mismatched vector: %d ns, want 0", got)
	}

	node := func(vec uint32) (count, ns uint64) {
		var per []probesVecStat
		if err := o.SoftirqNode.Lookup(vec, &per); err != nil {
			t.Fatal(err)
		}
		for _, v := range per {
			count += v.Count
			ns += v.Ns
		}
		return count, ns
	}
	if c, ns := node(netRX); c != 4 || ns != 750 {
		t.Errorf("node NET_RX: %d softirqs, %d ns; want 4, 750", c, ns)
	}
	if c, ns := node(timer); c != 2 || ns != 100 {
		t.Errorf("node TIMER: %d softirqs, %d ns; want 2, 100", c, ns)
	}
	checkStats(t, "proc", o.ProcStats, probesProcKey{Tgid: 10, Start: 20}, statsWant{
		probesStatFieldSTAT_SOFTIRQ_COUNT: 5, probesStatFieldSTAT_SOFTIRQ_NS: 750})
	checkStats(t, "cgroup", o.CgroupStats, uint64(30), statsWant{
		probesStatFieldSTAT_SOFTIRQ_COUNT: 6, probesStatFieldSTAT_SOFTIRQ_NS: 850})
}

func TestLogicNet(t *testing.T) {
	o := loadLogic(t)
	const inet, inet6, unix = 2, 10, 1
	const tcp, udp = 6, 17
	const peek = 2
	neg := func(e int32) uint64 { return uint64(uint32(e)) }
	for _, c := range []struct {
		name                            string
		family, proto, ret, flags, recv uint64
		want                            probesStatField
	}{
		{"tcp send", inet, tcp, 1000, 0, 0, probesStatFieldSTAT_TCP_SEND_BYTES},
		{"tcp6 recv", inet6, tcp, 400, 0, 1, probesStatFieldSTAT_TCP_RECV_BYTES},
		{"tcp peek", inet, tcp, 400, peek, 1, probesStatFieldSTAT_NR},
		{"udp send", inet, udp, 1200, 0, 0, probesStatFieldSTAT_UDP_SEND_BYTES},
		{"udp6 recv", inet6, udp, 1200, 0, 1, probesStatFieldSTAT_UDP_RECV_BYTES},
		{"EAGAIN", inet, tcp, neg(-11), 0, 1, probesStatFieldSTAT_NR},
		{"EOF", inet, tcp, 0, 0, 1, probesStatFieldSTAT_NR},
		{"unix socket", unix, 0, 100, 0, 0, probesStatFieldSTAT_NR},
		{"raw IP", inet, 255, 100, 0, 0, probesStatFieldSTAT_NR},
	} {
		if got := probesStatField(run(t, o.TestNet, 10, 20, 30, c.family, c.proto, c.ret, c.flags, c.recv)); got != c.want {
			t.Errorf("%s: field %d, want %d", c.name, got, c.want)
		}
	}
	want := statsWant{
		probesStatFieldSTAT_TCP_SEND_BYTES: 1000, probesStatFieldSTAT_TCP_SENDS: 1,
		probesStatFieldSTAT_TCP_RECV_BYTES: 400, probesStatFieldSTAT_TCP_RECVS: 1,
		probesStatFieldSTAT_UDP_SEND_BYTES: 1200, probesStatFieldSTAT_UDP_SENDS: 1,
		probesStatFieldSTAT_UDP_RECV_BYTES: 1200, probesStatFieldSTAT_UDP_RECVS: 1,
	}
	checkStats(t, "proc", o.ProcStats, probesProcKey{Tgid: 10, Start: 20}, want)
	checkStats(t, "cgroup", o.CgroupStats, uint64(30), want)
}

func TestLogicBio(t *testing.T) {
	o := loadLogic(t)
	const read, write, discard, flush = 0, 1, 3, 2
	const reqSync = 1 << 11 // a flag above the op bits
	for _, c := range []struct {
		name               string
		opf, bytes, nested uint64
		want               probesStatField
	}{
		{"write", write, 4096, 0, probesStatFieldSTAT_BLK_WRITE_BYTES},
		{"sync write", write | reqSync, 1 << 20, 0, probesStatFieldSTAT_BLK_WRITE_BYTES},
		{"read", read, 8192, 0, probesStatFieldSTAT_BLK_READ_BYTES},
		{"stacked device's bio", write, 4096, 1, probesStatFieldSTAT_NR},
		{"discard", discard, 1 << 30, 0, probesStatFieldSTAT_NR},
		{"flush", flush, 0, 0, probesStatFieldSTAT_NR},
	} {
		if got := probesStatField(run(t, o.TestBio, 10, 20, 30, c.opf, c.bytes, c.nested)); got != c.want {
			t.Errorf("%s: field %d, want %d", c.name, got, c.want)
		}
	}
	want := statsWant{
		probesStatFieldSTAT_BLK_WRITE_BYTES: 4096 + 1<<20, probesStatFieldSTAT_BLK_WRITES: 2,
		probesStatFieldSTAT_BLK_READ_BYTES: 8192, probesStatFieldSTAT_BLK_READS: 1,
	}
	checkStats(t, "proc", o.ProcStats, probesProcKey{Tgid: 10, Start: 20}, want)
	checkStats(t, "cgroup", o.CgroupStats, uint64(30), want)
}

func TestLogicCounterDelta(t *testing.T) {
	o := loadLogic(t)
	for _, c := range []struct {
		name                            string
		slot, counter, enabled, running uint64
		want                            uint32
	}{
		{"first reading on a CPU: no slice start", 0, 100, 10, 10, 0},
		{"always running", 0, 250, 20, 20, 150},
		{"other slot's first reading", 1, 5000, 20, 20, 0},
		{"multiplexed: ran half the slice", 0, 350, 40, 30, 200},
		{"not scheduled on the PMU this slice", 0, 350, 50, 30, 0},
		{"counter went backwards (reset)", 0, 10, 60, 40, 0},
		{"slot 1 again", 1, 5600, 30, 30, 600},
		{"after the reset", 0, 60, 70, 50, 50},
	} {
		if got := run(t, o.TestCounter, c.slot, c.counter, c.enabled, c.running); got != c.want {
			t.Errorf("%s: delta %d, want %d", c.name, got, c.want)
		}
	}
}

// A map entry's counters land in the ProbeStats fields of the same
// STAT_* name: Fields follows enum stat_field's order.
func TestCountersFollowStatEnum(t *testing.T) {
	if n := len(new(reading.ProbeStats).Fields()); n != int(probesStatFieldSTAT_NR) {
		t.Fatalf("ProbeStats has %d counters, enum stat_field %d", n, probesStatFieldSTAT_NR)
	}
	var v probesStats
	for i := range v.V {
		v.V[i] = uint64(i) + 100
	}
	c := countersFrom(&v)
	for _, tc := range []struct {
		name  string
		got   uint64
		field probesStatField
	}{
		{"PageCacheAccessed", c.PageCacheAccessed, probesStatFieldSTAT_PC_ACCESSED},
		{"PageCacheDirtied", c.PageCacheDirtied, probesStatFieldSTAT_PC_DIRTIED},
		{"SoftirqNs", c.SoftirqNs, probesStatFieldSTAT_SOFTIRQ_NS},
		{"BlockWrites", c.BlockWrites, probesStatFieldSTAT_BLK_WRITES},
		{"TCPRecvBytes", c.TCPRecvBytes, probesStatFieldSTAT_TCP_RECV_BYTES},
		{"UDPRecvs", c.UDPRecvs, probesStatFieldSTAT_UDP_RECVS},
		{"Counters[0]", c.Counters[0], probesStatFieldSTAT_COUNTER0},
		{"Counters[3]", c.Counters[3], probesStatFieldSTAT_COUNTER3},
	} {
		if want := uint64(tc.field) + 100; tc.got != want {
			t.Errorf("%s = %d, want entry %d's value %d", tc.name, tc.got, tc.field, want)
		}
	}
}
