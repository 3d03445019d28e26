// SPDX-License-Identifier: GPL-2.0
//
// The probes' per-task counters and their fold, shared by both objects.
//
// The probes (probes.bpf.c) count each event in the task's own storage
// (pending) and fold it into the cumulative per-process and per-cgroup maps
// later. The accounting object (accounting.bpf.c) includes this header too:
// its task iterator, which walks every task at each collection anyway, folds
// each task's pending counters as it passes, so a collection walks the
// tasks once, not once for the CPU accounting and again for the probes. The
// loader creates these maps with the accounting object and hands them to
// the probes' programs (internal/bpfloader, probes.go); without the probes they
// stay empty, and the iterator's fold is one task-storage lookup that finds
// nothing.

#ifndef WATTRACE_FOLD_H
#define WATTRACE_FOLD_H

#include "common.h"

// One cumulative counter per field, per process and per cgroup. An array,
// so that one helper adds to any field; bpf2go turns the enum into Go
// constants, which keeps the reader's indices in step with this file.
enum stat_field {
	STAT_PC_ACCESSED,   // pages read through the page cache (read, splice)
	STAT_PC_ADDED,      // pages added to the page cache (misses, readahead, new pages written)
	STAT_PC_DIRTIED,    // pages turned dirty by this task
	STAT_SOFTIRQ_COUNT, // softirqs that interrupted this task
	STAT_SOFTIRQ_NS,    // and their time
	STAT_BLK_READ_BYTES,
	STAT_BLK_READS, // bios submitted, not requests: merging happens later
	STAT_BLK_WRITE_BYTES,
	STAT_BLK_WRITES,
	STAT_TCP_SEND_BYTES, // the four TCP fields, then the four UDP fields, in this order
	STAT_TCP_SENDS,
	STAT_TCP_RECV_BYTES,
	STAT_TCP_RECVS,
	STAT_UDP_SEND_BYTES,
	STAT_UDP_SENDS,
	STAT_UDP_RECV_BYTES,
	STAT_UDP_RECVS,
	STAT_COUNTER0, // MAX_COUNTERS perf counters, in the loader's slot order
	STAT_COUNTER1,
	STAT_COUNTER2,
	STAT_COUNTER3,
	STAT_NR,
};

struct stats {
	__u64 v[STAT_NR];
};

// Per process (tgid + leader start, as the CPU accounting keys them). User
// space deletes an entry once the CPU accounting has reported the process
// gone; NO_PREALLOC so that an idle exporter does not hold 6 MiB.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 32768);
	__type(key, struct proc_key);
	__type(value, struct stats);
} proc_stats SEC(".maps");

// Per cgroup id of the key hierarchy.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct stats);
} cgroup_stats SEC(".maps");

// Slot 0: events whose process entry could not be stored (map full).
// Slot 1: events whose cgroup entry could not be stored.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} probe_drops SEC(".maps");

// A task's last page-cache read range, to tell a new read from the same
// read coming back for its next batch (see read_pages).
struct read_state {
	__u64 mapping;
	__u64 index;
	__u64 last;
};

// Per task: what its events counted and what of that has been folded into
// proc_stats and cgroup_stats. An event adds to its own task's counters
// (one task-storage lookup, plain adds: each field has one writer program,
// a program does not nest with itself on a CPU, and a task is current on
// one CPU at a time); the maps are brought up to date at collection time by
// the accounting's task iterator (dump_task; fold_tasks when the probes run
// without it), at exit by fold_exit and at free by fold_free.
struct task_pending {
	__u64 css;  // the task's css_set when cg was read: a move changes it
	__u64 cg;   // cgroup id of the key hierarchy that counted belongs to
	__u32 busy; // a fold is running (taken with cmpxchg)
	__u32 pad;
	struct read_state rs; // the page-cache read in progress (read_pages)
	struct stats counted; // cumulative since the task's first event
	struct stats folded;  // what of counted the maps already have
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_pending);
} pending SEC(".maps");

static __always_inline void probe_drop(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&probe_drops, &slot);
	if (v)
		*v += 1;
}

// stats_of finds or creates the entry of key in map (proc_stats or
// cgroup_stats); NULL, counted in probe_drops[slot], when the map is full.
static __always_inline struct stats *stats_of(void *map, const void *key, __u32 slot)
{
	struct stats *s = bpf_map_lookup_elem(map, key);
	if (s)
		return s;
	struct stats init = {};
	// BPF_NOEXIST: another CPU may have created the entry since the
	// lookup; then the second lookup finds that one.
	bpf_map_update_elem(map, key, &init, BPF_NOEXIST);
	s = bpf_map_lookup_elem(map, key);
	if (!s)
		probe_drop(slot);
	return s;
}

// fold_lock and fold_unlock keep two folds of one task (the iterator on one
// CPU, the task itself at a cgroup move or at exit on another) from
// crediting the same counts twice or to the wrong cgroup.
static __always_inline bool fold_lock(struct task_pending *tp)
{
	return __sync_val_compare_and_swap(&tp->busy, 0, 1) == 0;
}

static __always_inline void fold_unlock(struct task_pending *tp)
{
	__sync_lock_test_and_set(&tp->busy, 0);
}

// fold adds what t's events counted since the last fold to t's process and
// to the cgroup the counts belong to (tp->cg). The caller holds the lock,
// or knows that nothing else can fold t (its free).
// Not inlined: it is the cold path of every hook.
static __noinline void fold(struct task_pending *tp, struct task_struct *t)
{
	struct stats *ps = NULL, *cs = NULL;
	struct proc_key pk = {};
	bool any = false;

	for (__u32 i = 0; i < STAT_NR; i++) {
		if (tp->counted.v[i] != tp->folded.v[i]) {
			any = true;
			break;
		}
	}
	if (!any)
		return;
	pk.tgid = BPF_CORE_READ(t, tgid);
	pk.start = BPF_CORE_READ(t, group_leader, start_time);
	if (pk.tgid)
		ps = stats_of(&proc_stats, &pk, 0);
	cs = stats_of(&cgroup_stats, &tp->cg, 1);
	for (__u32 i = 0; i < STAT_NR; i++) {
		// Read once: the task may be counting on another CPU.
		__u64 c = *(volatile __u64 *)&tp->counted.v[i];
		__u64 d = c - tp->folded.v[i];

		if (!d)
			continue;
		tp->folded.v[i] = c;
		if (ps)
			__sync_fetch_and_add(&ps->v[i], d);
		if (cs)
			__sync_fetch_and_add(&cs->v[i], d);
	}
}

// fold_task folds t's pending counters into the maps, unless another fold
// of t holds them (t moving cgroups or exiting right now folds them itself).
static __always_inline void fold_task(struct task_struct *t)
{
	struct task_pending *tp = bpf_task_storage_get(&pending, t, 0, 0);

	if (!tp || !fold_lock(tp))
		return;
	fold(tp, t);
	fold_unlock(tp);
}

#endif
