// SPDX-License-Identifier: GPL-2.0
//
// What every wattrace BPF object shares: how a task is keyed. Workloads are
// keyed by the cgroup of one hierarchy (v2, or a v1 controller's) and
// processes by tgid + group leader start time, so that figures from
// different objects join on the same keys in user space.

#ifndef WATTRACE_COMMON_H
#define WATTRACE_COMMON_H

#include "../vmlinux/vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

// Which cgroup hierarchy keys workloads; set by the loader before load.
// Each object that includes this header has its own copy in its .rodata.
#define HIER_V2 0
#define HIER_V1 1
const volatile __u32 hierarchy = HIER_V2;
// Subsystem index (enum cgroup_subsys_id) of the v1 controller that keys
// workloads, resolved by the loader from kernel BTF.
const volatile __u32 v1_subsys = 0;

struct proc_key {
	__u32 tgid;
	__u32 pad;
	__u64 start; // group leader's start_time: PIDs are reused, this pair is not
};

static __always_inline __u64 task_cgroup(struct task_struct *t)
{
	if (hierarchy == HIER_V1) {
		struct cgroup_subsys_state *css;
		css = BPF_CORE_READ(t, cgroups, subsys[v1_subsys & 15]);
		return BPF_CORE_READ(css, cgroup, kn, id);
	}
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

// in_key_hierarchy tells whether cgrp belongs to the hierarchy that keys
// workloads: a v1 cgroup of that controller's hierarchy, or a v2 cgroup.
static __always_inline bool in_key_hierarchy(struct cgroup *cgrp)
{
	if (hierarchy == HIER_V1)
		return BPF_CORE_READ(cgrp, subsys[v1_subsys & 15]) != NULL;
	// The default (v2) hierarchy is the one with id 0, as /proc/PID/cgroup
	// prints it ("0::/...").
	return BPF_CORE_READ(cgrp, root, hierarchy_id) == 0;
}

static __always_inline __s32 task_cpu(struct task_struct *t)
{
	if (bpf_core_field_exists(t->thread_info.cpu))
		return BPF_CORE_READ(t, thread_info.cpu);
	return BPF_CORE_READ(t, wake_cpu);
}

#endif
