// SPDX-License-Identifier: GPL-2.0
//
// The cost floor: a sched_switch program that does nothing. Benchmarks attach
// it beside ours in the same run, so "cost per context switch" is read
// against what merely attaching anything at that hook costs on this machine.

#include "../vmlinux/vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/sched_switch")
int BPF_PROG(floor_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return 0;
}
