// SPDX-License-Identifier: GPL-2.0
//
// CPU accounting from the kernel's own per-task runtime.
//
// The kernel already keeps every live task's exact runtime
// (se.sum_exec_runtime, the figure cpuacct and cpu.stat are charged from),
// so user space reads it for all tasks at collection time through a task
// iterator. What the iterator can't see is the runtime a task accumulated
// after its last read; the exit hook adds that to cumulative per-process
// and per-cgroup maps when the task exits, and the dead and free hooks add
// what the task ran after that (the rest of do_exit, and whatever the
// scheduler had not yet folded in at the exit hook) at its last context
// switch and when it is freed.
//
// Each path claims the runtime it reports: per-task storage holds how much
// of the task's runtime has been claimed, advanced only by compare-and-swap,
// and a path reports only the part it claimed. So no interleaving of the
// iterator with the hooks counts a nanosecond twice, and none is lost as
// long as one path sees the task after it last ran.
// The claim also says where the runtime goes: a task that moves to another
// cgroup of the key hierarchy (a launcher's `echo $$ > cgroup.procs`) has
// what it ran before the move settled to the cgroup it ran in, by the move
// hook, so the iterator and the exit hooks, which credit the cgroup the
// task is in when they run, only see what it ran after.
//
// Three hooks see an ending task because none suffices alone: the free
// hook runs from an RCU callback, in softirq on whatever task was
// interrupted, and the kernel skips tracing programs there when that task
// is inside a BPF map syscall (seen on 6.18: ~1% of frees under a busy
// agent, with no recursion miss counted); the exit hook runs in the exiting
// task itself, but sum_exec_runtime is folded in only at ticks and
// switches, so for a process that lives a millisecond it may hold little
// of its runtime yet; the dead hook sees the final figure, in the
// scheduler, at the cost of one comparison per context switch.
//
// The iterator also folds the kernel probes' per-task counters (fold.h)
// as it passes each task, so a collection walks the tasks once for both.

#include "fold.h"

char LICENSE[] SEC("license") = "GPL";

// include/linux/sched.h; macros are not in BTF.
#define EXIT_DEAD 0x00000010
#define TASK_DEAD 0x00000080

// How much of a task's runtime and switches has been claimed (reported by
// one of the paths). Freed with the task.
struct reported {
	__u64 runtime;
	__u64 switches;
	// The key-hierarchy cgroup the task has been in since its fork or its
	// last move (0: not known yet); the move hook credits it what the task
	// ran before the move.
	__u64 home;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct reported);
} reported SEC(".maps");

struct counters {
	__u64 runtime;
	__u64 switches;
};

// A freed task's process: cgroup and comm are kept so that a process that
// started and ended between two reads still has a name and a home.
struct proc_exit {
	__u64 runtime;
	__u64 switches;
	__u64 cgroup;
	char comm[16];
};

// Cumulative runtime claimed by the hooks (and by the iterator when its
// record did not fit), per process. User space reads deltas and deletes an
// entry one read after its process is gone.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, struct proc_key);
	__type(value, struct proc_exit);
} exited_procs SEC(".maps");

// The same remainders per cgroup id of the key hierarchy. Never dropped on
// overflow of exited_procs, so cgroup totals stay exact under fork storms.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, __u64);
	__type(value, struct counters);
} exited_cgroups SEC(".maps");

// Slot 0: exits whose process entry could not be stored (map full).
// Slot 1: exits whose cgroup entry could not be stored.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

// One record per task, written by the iterator: the runtime and switches it
// claimed since the task was last reported, not the task's totals. bpf2go
// generates its Go twin, accountingTaskRec, through which internal/bpfloader's
// parseTasks decodes it.
struct task_rec {
	__u32 tid;
	__u32 tgid;
	__u64 start;
	__u64 leader_start;
	__u64 cgroup;
	__u64 runtime;
	__u64 switches;
	__s32 cpu;
	__u32 pad;
	char comm[16];
};
// Keeps the record type in BTF so bpf2go can generate its Go twin.
const struct task_rec *unused_task_rec __attribute__((unused));

static __always_inline void count_drop(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&drops, &slot);
	if (v)
		*v += 1;
}

// add_cgroup and add_proc add to an entry, creating it with the amounts
// when it is new; BPF_NOEXIST fails when another CPU created it since the
// lookup, and then the amounts are added to that one.
static __always_inline void add_cgroup(__u64 cg, __u64 runtime, __u64 switches)
{
	struct counters *c = bpf_map_lookup_elem(&exited_cgroups, &cg);
	if (!c) {
		struct counters init = {.runtime = runtime, .switches = switches};
		if (bpf_map_update_elem(&exited_cgroups, &cg, &init, BPF_NOEXIST) == 0)
			return;
		c = bpf_map_lookup_elem(&exited_cgroups, &cg);
		if (!c) {
			count_drop(1);
			return;
		}
	}
	__sync_fetch_and_add(&c->runtime, runtime);
	__sync_fetch_and_add(&c->switches, switches);
}

static __always_inline void add_proc(struct proc_key *pk, struct task_struct *t,
				     __u64 cg, __u64 runtime, __u64 switches)
{
	struct proc_exit *e = bpf_map_lookup_elem(&exited_procs, pk);
	if (!e) {
		struct proc_exit init = {.runtime = runtime, .switches = switches, .cgroup = cg};
		bpf_probe_read_kernel_str(&init.comm, sizeof(init.comm), t->comm);
		if (bpf_map_update_elem(&exited_procs, pk, &init, BPF_NOEXIST) == 0)
			return;
		e = bpf_map_lookup_elem(&exited_procs, pk);
		if (!e) {
			count_drop(0);
			return;
		}
	}
	__sync_fetch_and_add(&e->runtime, runtime);
	__sync_fetch_and_add(&e->switches, switches);
}

// claim advances *claimed to now and returns the part it advanced, or 0
// when another path has already claimed up to now or beyond. Paths race
// only on one task (the iterator against its exit or free), so a second
// try nearly always settles it; a third failure leaves the part to the
// next path, which claims it then.
static __always_inline __u64 claim(__u64 *claimed, __u64 now)
{
	for (int i = 0; i < 3; i++) {
		__u64 old = *claimed;
		if (now <= old)
			return 0;
		if (__sync_val_compare_and_swap(claimed, old, now) == old)
			return now - old;
	}
	return 0;
}

// report claims what task t ran since it was last reported, as far as r
// records, and adds it to the exit maps: to cgroup cg, and to t's process,
// which lives in cgroup where.
static __always_inline void report(struct task_struct *t, struct reported *r,
				   __u64 cg, __u64 where)
{
	__u64 runtime = claim(&r->runtime, t->se.sum_exec_runtime);
	__u64 switches = claim(&r->switches, t->nvcsw + t->nivcsw);
	struct proc_key pk = {};

	if (runtime == 0 && switches == 0)
		return;
	pk.tgid = t->tgid;
	pk.start = t->group_leader->start_time;
	add_cgroup(cg, runtime, switches);
	add_proc(&pk, t, where, runtime, switches);
}

// Where credit is called from: the paths that see a task end.
enum credit_path { AT_EXIT, AT_DEAD, AT_FREE };

// credit claims what task t ran since it was last reported and adds it to
// the exit maps, in the cgroup t is in. At exit the storage is created if
// the iterator never saw t, so that the later paths claim only the tail;
// if it can't be, exit and dead leave everything to the free hook, which
// finds no storage and then takes all of t's runtime as unreported (only
// one path may do that, or the runtime would be counted twice).
static __always_inline void credit(struct task_struct *t, enum credit_path at)
{
	struct reported *r;
	struct proc_key pk = {};
	__u64 runtime, switches, cg;

	if (t->pid == 0)
		return;
	r = bpf_task_storage_get(&reported, t, 0, at == AT_EXIT ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	cg = task_cgroup(t);
	if (r) {
		report(t, r, cg, cg);
		return;
	}
	if (at != AT_FREE)
		return;
	runtime = t->se.sum_exec_runtime;
	switches = t->nvcsw + t->nivcsw;
	if (runtime == 0 && switches == 0)
		return;
	pk.tgid = t->tgid;
	pk.start = t->group_leader->start_time;
	add_cgroup(cg, runtime, switches);
	add_proc(&pk, t, cg, runtime, switches);
}

SEC("iter/task")
int dump_task(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	struct task_rec rec = {};
	struct proc_key pk = {};
	struct reported *r;
	__u64 runtime, switches;

	if (!t)
		return 0;
	// The probes' counters of this task, folded on the way (fold.h): one
	// walk of the tasks per collection serves both objects.
	fold_task(t);
	// A released task is the free hook's: its record would say nothing
	// the hook does not.
	if (t->exit_state & EXIT_DEAD)
		return 0;
	rec.tid = t->pid;
	if (rec.tid == 0) // the idle task is idle, never a workload
		return 0;
	rec.tgid = t->tgid;
	rec.start = t->start_time;
	rec.leader_start = t->group_leader->start_time;
	rec.cgroup = task_cgroup(t);
	rec.cpu = task_cpu(t);
	BPF_CORE_READ_STR_INTO(&rec.comm, t, comm);
	runtime = t->se.sum_exec_runtime;
	switches = t->nvcsw + t->nivcsw;

	// Without storage nothing can be claimed: the task is still listed
	// (alive, named, placed) and its runtime is claimed by a later read or
	// by its hooks.
	r = bpf_task_storage_get(&reported, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (r) {
		rec.runtime = claim(&r->runtime, runtime);
		rec.switches = claim(&r->switches, switches);
		// A task older than the programs has no home until now.
		if (!r->home)
			__sync_val_compare_and_swap(&r->home, 0, rec.cgroup);
	}
	if (bpf_seq_write(seq, &rec, sizeof(rec)) == 0 || (rec.runtime == 0 && rec.switches == 0))
		return 0;
	// The seq buffer is full: the kernel drops this record and shows the
	// task again on the next read() of the iterator, if it can still find
	// it. What was claimed for the dropped record goes to the exit maps,
	// which user space adds like any other claim.
	pk.tgid = rec.tgid;
	pk.start = rec.leader_start;
	add_cgroup(rec.cgroup, rec.runtime, rec.switches);
	add_proc(&pk, t, rec.cgroup, rec.runtime, rec.switches);
	return 0;
}

// The css_task open-coded iterator (Linux 6.7 for iterator programs).
// Weak: on a kernel without it dump_cgroup does not load, and the loader
// loads the other programs without it (internal/bpfloader, newCollection).
extern int bpf_iter_css_task_new(struct bpf_iter_css_task *it, struct cgroup_subsys_state *css,
				 unsigned int flags) __weak __ksym;
extern struct task_struct *bpf_iter_css_task_next(struct bpf_iter_css_task *it) __weak __ksym;
extern void bpf_iter_css_task_destroy(struct bpf_iter_css_task *it) __weak __ksym;

// One record per cgroup, written by dump_cgroup: what the cgroup's tasks
// ran and switched, cumulative since its entry in exited_cgroups was made.
// bpf2go generates its Go twin, accountingCgroupRec.
struct cgroup_rec {
	__u64 id;
	__u64 runtime;
	__u64 switches;
};
const struct cgroup_rec *unused_cgroup_rec __attribute__((unused));

// A read of one cgroup subtree, where dump_task reads the whole node: the
// cgroup iterator (attached to a cgroup of the key hierarchy, in
// descendants-first order) calls this once per cgroup, which walks only
// the tasks in that cgroup itself. Each task's unclaimed runtime is
// claimed as dump_task claims it, but added to the cgroup's exit-map entry
// rather than written out, so that the entry holds everything the
// cgroup's tasks ran since it was made (the hooks add the ended tasks'
// part there too) and one record per cgroup says it. The cost is that of
// the subtree's tasks, whatever the node runs besides. Dying tasks are
// not walked: they are their exit hooks'.
SEC("iter/cgroup")
int dump_cgroup(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;
	struct bpf_iter_css_task it;
	struct cgroup_rec rec = {};
	struct task_struct *t;
	struct counters *c;
	__u64 runtime = 0, switches = 0;

	if (!cgrp)
		return 0;
	rec.id = cgrp->kn->id;
	bpf_iter_css_task_new(&it, &cgrp->self, 0);
	while ((t = bpf_iter_css_task_next(&it))) {
		struct reported *r;

		if (t->pid == 0 || (t->exit_state & EXIT_DEAD))
			continue;
		r = bpf_task_storage_get(&reported, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!r)
			continue; // claimed by a later read or by its hooks
		runtime += claim(&r->runtime, t->se.sum_exec_runtime);
		switches += claim(&r->switches, t->nvcsw + t->nivcsw);
		if (!r->home)
			__sync_val_compare_and_swap(&r->home, 0, rec.id);
	}
	bpf_iter_css_task_destroy(&it);
	if (runtime || switches)
		add_cgroup(rec.id, runtime, switches);
	c = bpf_map_lookup_elem(&exited_cgroups, &rec.id);
	if (c) {
		rec.runtime = c->runtime;
		rec.switches = c->switches;
	}
	// A record that does not fit is shown again on the next read; what
	// it says is kept in the map meanwhile.
	bpf_seq_write(seq, &rec, sizeof(rec));
	return 0;
}

// At exit, in the exiting task (PF_EXITING is set): everything it ran up to
// here. The tail of do_exit is left to the free hook.
SEC("tp_btf/sched_process_exit")
int BPF_PROG(task_exit, struct task_struct *t)
{
	if (t)
		credit(t, AT_EXIT);
	return 0;
}

// At free, an RCU grace period after the task was released: whatever the
// exit hook did not claim (its tail, or all of it when the exit hook was
// skipped). Task storage is freed after this tracepoint.
SEC("tp_btf/sched_process_free")
int BPF_PROG(task_free, struct task_struct *t)
{
	if (t)
		credit(t, AT_FREE);
	return 0;
}

// At fork, in the parent, after the child was placed in its cgroup (the
// parent's, or the one clone3 named): the child's home, for the move hook.
// Creating the storage here is not extra work: the exit hook would create
// it for any task the iterator never saw.
SEC("tp_btf/sched_process_fork")
int BPF_PROG(task_fork, struct task_struct *parent, struct task_struct *child)
{
	struct reported *r;

	if (!child)
		return 0;
	r = bpf_task_storage_get(&reported, child, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (r)
		r->home = task_cgroup(child);
	return 0;
}

// After task t was moved to cgroup dst (cgroup_attach_task fires once the
// move is committed: t's css_set is already dst's). What t ran until now
// is settled to its home, the cgroup it ran in, and dst becomes its home.
//
// "Until now" is sum_exec_runtime, which the scheduler folds in at ticks,
// context switches and dequeues. When the cpu controller takes part in the
// move (v1 cpu,cpuacct, or v2 with cpu enabled), sched_move_task dequeued
// t at the move and so folded its runtime to that moment, as it charged
// cpuacct and cpu.stat; otherwise up to one tick of runtime before the move
// is still unfolded and goes to dst, as it does in the kernel's own cgroup
// accounting. When a whole process moves (cgroup.procs), the tracepoint
// names only its leader: the other threads' runtime before the move goes to
// dst.
SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(task_move, struct cgroup *dst, const char *path, struct task_struct *t,
	     bool threadgroup)
{
	struct reported *r;
	__u64 to, from;

	if (!t || !dst || t->pid == 0 || !in_key_hierarchy(dst))
		return 0;
	to = BPF_CORE_READ(dst, kn, id);
	r = bpf_task_storage_get(&reported, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!r)
		return 0;
	from = __sync_lock_test_and_set(&r->home, to);
	// Without a home (storage just created, for a task older than the
	// programs that the iterator has not seen), the runtime so far goes
	// to dst: it is claimed where the task is when it is next reported.
	if (from == 0 || from == to)
		return 0;
	report(t, r, from, to);
	return 0;
}

// At a dead task's last context switch (prev_state TASK_DEAD, from
// do_task_dead): the scheduler has just folded the task's last runtime in,
// so this sees its final sum_exec_runtime. It does what the free hook does,
// but in the scheduler, not in an RCU callback, so it is not skipped when
// the free hook is; a short-lived process (a launcher's /bin/true runs a
// millisecond, most of it never folded in before its exit hook) would
// otherwise lose most of its runtime with a skipped free. It runs on every
// context switch and returns at the first comparison for all but dead
// tasks.
SEC("tp_btf/sched_switch")
int BPF_PROG(task_dead, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	if (prev_state != TASK_DEAD || !prev)
		return 0;
	credit(prev, AT_DEAD);
	return 0;
}
