// SPDX-License-Identifier: GPL-2.0
//
// The optional kernel probes: page cache, softirq, block IO, network and
// per-task hardware counters.
//
// One object, several programs: every program here is loaded and attached
// on its own by the loader (internal/bpfloader/probes.go) against the same maps,
// so a hook the kernel lacks, or a program its verifier refuses, turns off
// only that probe's figures. All of them add to the same cumulative
// per-process and per-cgroup counters (struct stats); user space computes
// deltas. The counters' maps and their fold are in fold.h, which the
// accounting object shares.
//
// The logic lives in static __always_inline functions that take scalars;
// the hooks only gather the scalars from kernel objects. The SEC("raw_tp")
// test_* entries at the end call the same functions with values from their
// u64 context, which is how the logic is unit-tested with BPF_PROG_TEST_RUN
// (tp_btf programs can't be test-run). They are never attached.

#include "fold.h"

char LICENSE[] SEC("license") = "GPL";

// include/linux/socket.h, include/uapi/linux/in.h: macros, not in BTF.
#define AF_INET 2
#define AF_INET6 10
#define MSG_PEEK 2
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
// include/linux/blk_types.h: REQ_OP_BITS is 8 since the op field was split
// out of bi_opf (4.10); READ and WRITE have kept their values.
#define REQ_OP_MASK 0xff
#define REQ_OP_READ 0
#define REQ_OP_WRITE 1
// include/linux/interrupt.h: HI_SOFTIRQ .. RCU_SOFTIRQ.
#define NR_VECTORS 10
#define MAX_COUNTERS 4
// include/linux/sched.h
#define PF_EXITING 0x00000004

// log2 of the page size, set by the loader (PAGE_SHIFT is a macro).
const volatile __u32 page_shift = 12;
// How many perf event slots per CPU the loader filled in counter_events.
const volatile __u32 nr_counters = 0;

// Keeps the enum in BTF so bpf2go can generate its Go twin.
const enum stat_field *unused_stat_field __attribute__((unused));

// Node-level softirq figures by vector, per CPU.
struct vec_stat {
	__u64 count;
	__u64 ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NR_VECTORS);
	__type(key, __u32);
	__type(value, struct vec_stat);
} softirq_node SEC(".maps");

// The softirq running on this CPU: softirqs don't nest on one CPU (each
// runs with softirqs disabled), so one slot per CPU is enough.
struct softirq_start {
	__u64 ts;
	__u32 vec;
	__u32 valid;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct softirq_start);
} softirq_started SEC(".maps");


// Perf events opened by user space, one map per counter slot, indexed by
// CPU (the loader sizes them to the possible CPUs). One map per slot rather
// than one of cpu × slot entries: a perf event array holds at most one
// entry per possible CPU.
#define COUNTER_MAP(n)                                     \
	struct {                                           \
		__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY); \
		__uint(key_size, sizeof(__u32));           \
		__uint(value_size, sizeof(__u32));         \
	} counter_events##n SEC(".maps")
COUNTER_MAP(0);
COUNTER_MAP(1);
COUNTER_MAP(2);
COUNTER_MAP(3);

// read_counter reads slot i's event on this CPU; an error when none is there.
static __always_inline long read_counter(__u32 i, struct bpf_perf_event_value *v)
{
	switch (i) {
	case 0:
		return bpf_perf_event_read_value(&counter_events0, BPF_F_CURRENT_CPU, v, sizeof(*v));
	case 1:
		return bpf_perf_event_read_value(&counter_events1, BPF_F_CURRENT_CPU, v, sizeof(*v));
	case 2:
		return bpf_perf_event_read_value(&counter_events2, BPF_F_CURRENT_CPU, v, sizeof(*v));
	case 3:
		return bpf_perf_event_read_value(&counter_events3, BPF_F_CURRENT_CPU, v, sizeof(*v));
	}
	return -1;
}

// What each counter read at this CPU's last context switch.
struct counter_last {
	__u64 counter[MAX_COUNTERS];
	__u64 enabled[MAX_COUNTERS];
	__u64 running[MAX_COUNTERS];
	__u8 seen[MAX_COUNTERS];
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counter_last);
} counter_lasts SEC(".maps");

// ---- shared logic ---------------------------------------------------------


static __always_inline void bump(struct stats *s, __u64 field, __u64 val)
{
	if (field < STAT_NR && val)
		__sync_fetch_and_add(&s->v[field], val);
}

// account adds v1 to field f1 and v2 to f2 (STAT_NR: none) of a process
// (pk NULL: none, for the idle task) and its cgroup.
static __always_inline void account(const struct proc_key *pk, __u64 cg,
				    __u64 f1, __u64 v1, __u64 f2, __u64 v2)
{
	struct stats *s;

	if (!v1 && !v2)
		return;
	if (pk) {
		s = stats_of(&proc_stats, pk, 0);
		if (s) {
			bump(s, f1, v1);
			bump(s, f2, v2);
		}
	}
	s = stats_of(&cgroup_stats, &cg, 1);
	if (s) {
		bump(s, f1, v1);
		bump(s, f2, v2);
	}
}

// task_keys fills pk with t's process key and returns t's cgroup. The idle
// task (pid 0) is no workload: pk is then NULL for account().
static __always_inline __u64 task_keys(struct task_struct *t, struct proc_key *pk)
{
	// t is a BTF pointer (tp_btf argument or bpf_get_current_task_btf):
	// plain loads, relocated by CO-RE, cost less than probe reads.
	pk->tgid = t->tgid;
	pk->start = t->group_leader->start_time;
	return task_cgroup(t);
}

// account_task adds to the maps directly, for what can't wait for a fold:
// the idle task's events (node only, never folded), an exiting task's, and
// an event that meets a fold of its own task in progress.
static __always_inline void account_task(struct task_struct *t, __u64 f1, __u64 v1,
					 __u64 f2, __u64 v2)
{
	struct proc_key pk = {};
	__u64 cg;

	cg = task_keys(t, &pk);
	account(t->pid ? &pk : NULL, cg, f1, v1, f2, v2);
}


// pending_of returns the counters t's events add to, or NULL when the event
// must go to the maps directly. On t's first event, and when t has moved to
// another cgroup since (its css_set changed), what it counted so far is
// folded to the cgroup it was counted in before the new cgroup is taken.
static __always_inline struct task_pending *pending_of(struct task_struct *t)
{
	struct task_pending *tp;
	__u64 css;

	tp = bpf_task_storage_get(&pending, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tp)
		return NULL;
	css = (__u64)t->cgroups;
	if (tp->css == css)
		return tp;
	// A nested event of the same task, or the iterator, holds the lock:
	// this one goes to the maps directly.
	if (!fold_lock(tp))
		return NULL;
	if (tp->css)
		fold(tp, t);
	tp->css = css;
	tp->cg = task_cgroup(t);
	fold_unlock(tp);
	return tp;
}

static __always_inline void add_pending(struct task_pending *tp, __u64 f, __u64 v)
{
	if (f < STAT_NR && v)
		tp->counted.v[f] += v;
}

// count_task adds v1 to field f1 and v2 to f2 (STAT_NR: none) of t, the
// current task.
static __always_inline void count_task(struct task_struct *t, struct task_pending *tp,
				       __u64 f1, __u64 v1, __u64 f2, __u64 v2)
{
	if (!v1 && !v2)
		return;
	// The idle task's events count for the node only, and an exiting
	// task may already have been folded for the last time.
	if (!tp || !t->pid || (t->flags & PF_EXITING)) {
		account_task(t, f1, v1, f2, v2);
		return;
	}
	add_pending(tp, f1, v1);
	add_pending(tp, f2, v2);
}

static __always_inline void account_current(__u64 f1, __u64 v1, __u64 f2, __u64 v2)
{
	struct task_struct *t = bpf_get_current_task_btf();

	if (!v1 && !v2)
		return;
	count_task(t, t->pid ? pending_of(t) : NULL, f1, v1, f2, v2);
}

// read_pages returns how many pages one mm_filemap_get_pages event adds to
// the pages read. The event reports the rest of the read's range
// (index..last), not the batch it found: a read longer than one batch (31
// folios) comes back with the same mapping and last page and a higher
// index, and its pages were all counted at the read's first event. The
// range is clamped to the file's size, since a read's buffer may reach
// past the end of the file.
static __always_inline __u64 read_pages(struct read_state *st, __u64 mapping,
					__u64 index, __u64 last, __u64 isize)
{
	bool cont = st->mapping == mapping && st->last == last && index > st->index;
	__u64 end = (isize + (1ULL << (page_shift & 31)) - 1) >> (page_shift & 31);

	st->mapping = mapping;
	st->index = index;
	st->last = last;
	if (cont)
		return 0;
	if (last + 1 < end)
		end = last + 1;
	return end > index ? end - index : 0;
}

static __always_inline void softirq_enter(struct softirq_start *s, __u32 vec, __u64 ts)
{
	s->ts = ts;
	s->vec = vec;
	s->valid = 1;
}

// softirq_leave counts one softirq of vec at node level and returns its
// time, zero when its entry was not seen (the program was attached while
// it ran).
static __always_inline __u64 softirq_leave(struct softirq_start *s, __u32 vec, __u64 ts)
{
	struct vec_stat *n;
	__u64 ns = 0;

	if (vec >= NR_VECTORS)
		return 0;
	if (s->valid && s->vec == vec && ts >= s->ts)
		ns = ts - s->ts;
	s->valid = 0;
	n = bpf_map_lookup_elem(&softirq_node, &vec);
	if (n) {
		n->count += 1; // per-CPU slot: no other writer
		n->ns += ns;
	}
	return ns;
}

// net_field is the bytes field of a send (recv 0) or receive of a TCP or
// UDP socket; the calls field follows it. STAT_NR for everything else.
static __always_inline __u32 net_field(__u32 family, __u32 proto, __s64 ret,
				       __u32 flags, bool recv)
{
	__u32 f;

	if (ret <= 0 || (family != AF_INET && family != AF_INET6))
		return STAT_NR;
	// A peek returns bytes that the next receive returns again.
	if (recv && (flags & MSG_PEEK))
		return STAT_NR;
	if (proto == IPPROTO_TCP)
		f = STAT_TCP_SEND_BYTES;
	else if (proto == IPPROTO_UDP)
		f = STAT_UDP_SEND_BYTES;
	else
		return STAT_NR;
	return recv ? f + 2 : f;
}

// bio_field is the bytes field of a bio (the count field follows it), or
// STAT_NR for one not counted: a bio submitted while another is being
// submitted (current->bio_list set) is a stacking driver (dm, md) passing
// on what was already counted at the top device.
static __always_inline __u32 bio_field(__u32 opf, bool nested)
{
	if (nested)
		return STAT_NR;
	switch (opf & REQ_OP_MASK) {
	case REQ_OP_READ:
		return STAT_BLK_READ_BYTES;
	case REQ_OP_WRITE:
		return STAT_BLK_WRITE_BYTES;
	}
	return STAT_NR;
}

// counter_delta returns what counter slot i counted since this CPU's last
// switch, scaled by enabled/running when the PMU multiplexed it, and
// remembers the new reading. Zero on a CPU's first reading (no slice start).
static __always_inline __u64 counter_delta(struct counter_last *l, __u32 i,
					   __u64 c, __u64 en, __u64 run)
{
	__u64 dc, den, drun;
	bool seen;

	i &= MAX_COUNTERS - 1;
	seen = l->seen[i];
	dc = c - l->counter[i];
	den = en - l->enabled[i];
	drun = run - l->running[i];
	if (!seen || c < l->counter[i] || run < l->running[i])
		dc = 0;
	l->counter[i] = c;
	l->enabled[i] = en;
	l->running[i] = run;
	l->seen[i] = 1;
	if (!dc || drun == 0)
		return 0;
	if (den == drun)
		return dc;
	if (dc < ~0ULL / den)
		return dc * den / drun;
	return dc / drun * den;
}

// Pages in a folio: _nr_pages (6.x, 64-bit) or the order kept in the first
// tail page's flags; 1 when the folio is not large (PG_head clear).
struct folio___old {
	unsigned int _folio_nr_pages;
} __attribute__((preserve_access_index));

static __always_inline __u64 folio_pages(struct folio *f)
{
	__u64 flags = 0;

	bpf_core_read(&flags, sizeof(flags), &f->flags);
	if (!(flags & (1ULL << bpf_core_enum_value(enum pageflags, PG_head))))
		return 1;
	if (bpf_core_field_exists(f->_nr_pages))
		return BPF_CORE_READ(f, _nr_pages);
	if (bpf_core_field_exists(((struct folio___old *)f)->_folio_nr_pages))
		return BPF_CORE_READ((struct folio___old *)f, _folio_nr_pages);
	return 1ULL << (BPF_CORE_READ(f, _flags_1) & 31);
}

// ---- hooks ----------------------------------------------------------------

SEC("tp_btf/mm_filemap_get_pages")
int BPF_PROG(pc_get_pages, struct address_space *mapping, unsigned long index,
	     unsigned long last_index)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct task_pending *tp;

	// The idle task reads no files; the read state lives in the task's
	// counters, so one storage lookup serves both.
	if (!t->pid)
		return 0;
	tp = pending_of(t);
	if (!tp) {
		// Rare (no memory, or a fold of this task in progress): keep
		// the read state anyway, in storage without the fold.
		tp = bpf_task_storage_get(&pending, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (tp)
			account_task(t, STAT_PC_ACCESSED,
				     read_pages(&tp->rs, (__u64)mapping, index, last_index,
						mapping->host->i_size),
				     STAT_NR, 0);
		return 0;
	}
	count_task(t, tp, STAT_PC_ACCESSED,
		   read_pages(&tp->rs, (__u64)mapping, index, last_index, mapping->host->i_size),
		   STAT_NR, 0);
	return 0;
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(pc_add, struct folio *folio)
{
	account_current(STAT_PC_ADDED, folio_pages(folio), STAT_NR, 0);
	return 0;
}

// Fires where a clean folio turns dirty (folio_account_dirtied), in the
// writer's context.
SEC("tp_btf/writeback_dirty_folio")
int BPF_PROG(pc_dirty_folio, struct folio *folio, struct address_space *mapping)
{
	account_current(STAT_PC_DIRTIED, folio_pages(folio), STAT_NR, 0);
	return 0;
}

// Kernels before folios (5.x) have the page variant: one page per event.
SEC("tp_btf/writeback_dirty_page")
int BPF_PROG(pc_dirty_page, struct page *page, struct address_space *mapping)
{
	account_current(STAT_PC_DIRTIED, 1, STAT_NR, 0);
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(softirq_in, unsigned int vec)
{
	__u32 zero = 0;
	struct softirq_start *s = bpf_map_lookup_elem(&softirq_started, &zero);

	if (s)
		softirq_enter(s, vec, bpf_ktime_get_ns());
	return 0;
}

// A softirq runs in the context of the task it interrupted (or of
// ksoftirqd), so current here is that task: the one whose time it took,
// not always the one the work was for.
SEC("tp_btf/softirq_exit")
int BPF_PROG(softirq_out, unsigned int vec)
{
	__u32 zero = 0;
	struct softirq_start *s = bpf_map_lookup_elem(&softirq_started, &zero);
	__u64 ns;

	if (!s)
		return 0;
	ns = softirq_leave(s, vec, bpf_ktime_get_ns());
	if (vec < NR_VECTORS)
		account_current(STAT_SOFTIRQ_COUNT, 1, STAT_SOFTIRQ_NS, ns);
	return 0;
}

// block_bio_queue runs in the submitter's context for every bio, once
// (BIO_TRACE_COMPLETION keeps a remapped bio from being traced again).
// Completion hooks run in interrupt context and know no task.
SEC("tp_btf/block_bio_queue")
int BPF_PROG(blk_bio_queue, struct bio *bio)
{
	struct task_struct *t = bpf_get_current_task_btf();
	// Plain loads through BTF pointers (CO-RE relocated): cheaper than
	// probe reads, and a fault reads zero.
	__u32 f = bio_field(bio->bi_opf, t->bio_list != NULL);

	if (f != STAT_NR)
		account_current(f, bio->bi_iter.bi_size, f + 1, 1);
	return 0;
}

// sock_sendmsg and sock_recvmsg, so every way payload reaches a socket from
// a task (write, send*, splice to a socket, io_uring), in the caller's
// context; ret is the payload bytes moved or an error.
SEC("tp_btf/sock_send_length")
int BPF_PROG(net_send, struct sock *sk, int ret, int flags)
{
	__u32 f;

	if (ret <= 0) // an error or nothing moved: no socket field to read
		return 0;
	f = net_field(sk->__sk_common.skc_family, sk->sk_protocol, ret, flags, false);

	if (f != STAT_NR)
		account_current(f, ret, f + 1, 1);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(net_recv, struct sock *sk, int ret, int flags)
{
	__u32 f;

	if (ret <= 0) // an error or nothing moved: no socket field to read
		return 0;
	f = net_field(sk->__sk_common.skc_family, sk->sk_protocol, ret, flags, true);

	if (f != STAT_NR)
		account_current(f, ret, f + 1, 1);
	return 0;
}

// Attached only when at least one counter opened: otherwise nothing of ours
// runs on a context switch. Credits what each counter counted since this
// CPU's last switch to the task switched out.
SEC("tp_btf/sched_switch")
int BPF_PROG(counters_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 zero = 0;
	struct counter_last *l = bpf_map_lookup_elem(&counter_lasts, &zero);
	struct bpf_perf_event_value v;
	__u64 d[MAX_COUNTERS] = {};
	struct proc_key pk = {};
	struct stats *s;
	bool any = false;
	__u64 cg;

	if (!l)
		return 0;
	for (__u32 i = 0; i < MAX_COUNTERS; i++) {
		if (i >= nr_counters)
			break;
		if (read_counter(i, &v))
			continue;
		d[i] = counter_delta(l, i, v.counter, v.enabled, v.running);
		any = any || d[i];
	}
	if (!any || prev->pid == 0)
		return 0;
	cg = task_keys(prev, &pk);
	s = stats_of(&proc_stats, &pk, 0);
	if (s)
		for (__u32 i = 0; i < MAX_COUNTERS; i++)
			bump(s, STAT_COUNTER0 + i, d[i]);
	s = stats_of(&cgroup_stats, &cg, 1);
	if (s)
		for (__u32 i = 0; i < MAX_COUNTERS; i++)
			bump(s, STAT_COUNTER0 + i, d[i]);
	return 0;
}

// ---- folds ----------------------------------------------------------------

// The fold of every live task at collection, for probes loaded without the
// accounting object: with it, the accounting's task iterator folds each task
// as it passes (fold.h), and this program is not run. Brings proc_stats and
// cgroup_stats up to date with every live task's counters. A task whose
// fold is held elsewhere (it is moving cgroups or exiting right now) is
// left for that fold.
SEC("iter/task")
int fold_tasks(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;

	if (t)
		fold_task(t);
	return 0;
}

// At exit (current is the exiting task, PF_EXITING already set, so its
// later events go to the maps directly): fold what it counted, so that a
// process is complete in the maps as soon as it has exited rather than
// after its task is freed an RCU grace period later.
SEC("tp_btf/sched_process_exit")
int BPF_PROG(fold_exit, struct task_struct *t)
{
	fold_task(t);
	return 0;
}

// At free: anything fold_exit could not take (the iterator held the lock).
// The iterator can't see a freed task and the task runs no more events, so
// no lock is needed. Task storage is freed after this tracepoint.
SEC("tp_btf/sched_process_free")
int BPF_PROG(fold_free, struct task_struct *t)
{
	struct task_pending *tp = bpf_task_storage_get(&pending, t, 0, 0);

	if (tp)
		fold(tp, t);
	return 0;
}

// ---- test entries (BPF_PROG_TEST_RUN only, never attached) ----------------

// State the test entries use instead of per-task and per-CPU state, so
// that consecutive test runs see the same slot whatever CPU they run on.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct read_state);
} test_read_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counter_last);
} test_counter_last SEC(".maps");

static __always_inline struct proc_key test_key(__u64 tgid, __u64 start)
{
	struct proc_key pk = {.tgid = tgid, .start = start};
	return pk;
}

// args: tgid, start, cgroup, field, value
SEC("raw_tp")
int test_account(struct bpf_raw_tracepoint_args *ctx)
{
	struct proc_key pk = test_key(ctx->args[0], ctx->args[1]);

	account(ctx->args[0] ? &pk : NULL, ctx->args[2], ctx->args[3], ctx->args[4], STAT_NR, 0);
	return 0;
}

// args: tgid, start, cgroup, mapping, index, last, isize; returns the pages counted
SEC("raw_tp")
int test_read(struct bpf_raw_tracepoint_args *ctx)
{
	struct proc_key pk = test_key(ctx->args[0], ctx->args[1]);
	__u32 zero = 0;
	struct read_state *st = bpf_map_lookup_elem(&test_read_state, &zero);
	__u64 pages;

	if (!st)
		return -1;
	pages = read_pages(st, ctx->args[3], ctx->args[4], ctx->args[5], ctx->args[6]);
	account(&pk, ctx->args[2], STAT_PC_ACCESSED, pages, STAT_NR, 0);
	return pages;
}

// args: tgid (0: idle), start, cgroup, vec, entry ts (0: entry not seen),
// exit ts; returns the ns counted
SEC("raw_tp")
int test_softirq(struct bpf_raw_tracepoint_args *ctx)
{
	struct proc_key pk = test_key(ctx->args[0], ctx->args[1]);
	__u32 zero = 0, vec = ctx->args[3];
	struct softirq_start *s = bpf_map_lookup_elem(&softirq_started, &zero);
	__u64 ns;

	if (!s)
		return -1;
	if (ctx->args[4])
		softirq_enter(s, vec, ctx->args[4]);
	ns = softirq_leave(s, vec, ctx->args[5]);
	if (vec < NR_VECTORS)
		account(ctx->args[0] ? &pk : NULL, ctx->args[2], STAT_SOFTIRQ_COUNT, 1, STAT_SOFTIRQ_NS, ns);
	return ns;
}

// args: tgid, start, cgroup, family, protocol, ret, flags, recv; returns the field
SEC("raw_tp")
int test_net(struct bpf_raw_tracepoint_args *ctx)
{
	struct proc_key pk = test_key(ctx->args[0], ctx->args[1]);
	__s64 ret = (__s32)ctx->args[5];
	__u32 f = net_field(ctx->args[3], ctx->args[4], ret, ctx->args[6], ctx->args[7]);

	if (f != STAT_NR)
		account(&pk, ctx->args[2], f, ret, f + 1, 1);
	return f;
}

// args: tgid, start, cgroup, bi_opf, bytes, nested; returns the field
SEC("raw_tp")
int test_bio(struct bpf_raw_tracepoint_args *ctx)
{
	struct proc_key pk = test_key(ctx->args[0], ctx->args[1]);
	__u32 f = bio_field(ctx->args[3], ctx->args[5]);

	if (f != STAT_NR)
		account(&pk, ctx->args[2], f, ctx->args[4], f + 1, 1);
	return f;
}

// args: slot, counter, enabled, running; returns the delta credited
SEC("raw_tp")
int test_counter(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 zero = 0;
	struct counter_last *l = bpf_map_lookup_elem(&test_counter_last, &zero);

	if (!l)
		return -1;
	return counter_delta(l, ctx->args[0], ctx->args[1], ctx->args[2], ctx->args[3]);
}
