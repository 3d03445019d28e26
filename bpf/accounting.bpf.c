// SPDX-License-Identifier: GPL-2.0
//
// CPU accounting from the kernel's own per-task runtime.
//
// Nothing here runs on a context switch. The kernel already keeps every live
// task's exact runtime (se.sum_exec_runtime, the figure cpuacct and cpu.stat
// are charged from), so user space reads it for all tasks at collection time
// through a task iterator. What the iterator can't see is the runtime a task
// accumulated after its last read and before it was freed; the free hook
// adds exactly that remainder to cumulative per-process and per-cgroup maps.
// Per-task storage remembers what the iterator last reported, which is what
// makes the remainder exact and keeps the two paths from counting twice.

#include "common.h"

char LICENSE[] SEC("license") = "GPL";

// include/linux/sched.h; macros are not in BTF.
#define EXIT_DEAD 0x00000010

// What the iterator last reported for a task. Freed with the task.
struct reported {
	__u64 runtime;
	__u64 switches;
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

// Cumulative runtime of freed tasks not yet reported, per process. User space
// reads deltas and deletes an entry one read after its process is gone.
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

// One record per task, written by the iterator. bpf2go generates its Go twin,
// accountingTaskRec, through which pkg/bpfloader's parseTasks decodes it.
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

static __always_inline void add_cgroup(__u64 cg, __u64 runtime, __u64 switches)
{
	struct counters *c = bpf_map_lookup_elem(&exited_cgroups, &cg);
	if (!c) {
		struct counters init = {};
		// BPF_NOEXIST: another CPU may have created the entry since the
		// lookup; then the second lookup finds that one.
		bpf_map_update_elem(&exited_cgroups, &cg, &init, BPF_NOEXIST);
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
		struct proc_exit init = {.cgroup = cg};
		BPF_CORE_READ_STR_INTO(&init.comm, t, comm);
		bpf_map_update_elem(&exited_procs, pk, &init, BPF_NOEXIST);
		e = bpf_map_lookup_elem(&exited_procs, pk);
		if (!e) {
			count_drop(0);
			return;
		}
	}
	__sync_fetch_and_add(&e->runtime, runtime);
	__sync_fetch_and_add(&e->switches, switches);
}

SEC("iter/task")
int dump_task(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	struct task_rec rec = {};
	struct reported *r;

	if (!t)
		return 0;
	// A released task belongs to the free hook from here on: its free runs
	// only after this RCU read-side section, so skipping it here is what
	// keeps its last slice from being counted by both paths.
	if (BPF_CORE_READ(t, exit_state) & EXIT_DEAD)
		return 0;
	rec.tid = BPF_CORE_READ(t, pid);
	if (rec.tid == 0) // the idle task is idle, never a workload
		return 0;
	rec.tgid = BPF_CORE_READ(t, tgid);
	rec.start = BPF_CORE_READ(t, start_time);
	rec.leader_start = BPF_CORE_READ(t, group_leader, start_time);
	rec.cgroup = task_cgroup(t);
	rec.runtime = BPF_CORE_READ(t, se.sum_exec_runtime);
	rec.switches = BPF_CORE_READ(t, nvcsw) + BPF_CORE_READ(t, nivcsw);
	rec.cpu = task_cpu(t);
	BPF_CORE_READ_STR_INTO(&rec.comm, t, comm);

	r = bpf_task_storage_get(&reported, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (r) {
		r->runtime = rec.runtime;
		r->switches = rec.switches;
	}
	bpf_seq_write(seq, &rec, sizeof(rec));
	return 0;
}

SEC("tp_btf/sched_process_free")
int BPF_PROG(task_free, struct task_struct *t)
{
	struct reported *r;
	struct proc_key pk = {};
	__u64 runtime, switches, cg;

	if (!t || BPF_CORE_READ(t, pid) == 0)
		return 0;
	runtime = BPF_CORE_READ(t, se.sum_exec_runtime);
	switches = BPF_CORE_READ(t, nvcsw) + BPF_CORE_READ(t, nivcsw);
	r = bpf_task_storage_get(&reported, t, 0, 0);
	if (r) {
		runtime = runtime > r->runtime ? runtime - r->runtime : 0;
		switches = switches > r->switches ? switches - r->switches : 0;
	}
	if (runtime == 0 && switches == 0)
		return 0;

	cg = task_cgroup(t);
	pk.tgid = BPF_CORE_READ(t, tgid);
	pk.start = BPF_CORE_READ(t, group_leader, start_time);
	add_cgroup(cg, runtime, switches);
	add_proc(&pk, t, cg, runtime, switches);
	return 0;
}
