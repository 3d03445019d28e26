// SPDX-License-Identifier: GPL-2.0
//
// The names of cgroups that come and go between two reads.
//
// User space names a cgroup id by finding its directory in cgroupfs. A cgroup
// created, used and removed within one interval (a batch step, a short-lived
// container) is gone before it can be found, and its CPU time would be
// exported under its id alone. The kernel hands every new cgroup's path to
// the cgroup_mkdir tracepoint, so this program remembers id → path for the
// key hierarchy. It runs once per cgroup creation, never on a hot path; the
// LRU map bounds its memory and forgets the oldest names first.

#include "common.h"

char LICENSE[] SEC("license") = "GPL";

// Longer paths are truncated; user space tells truncated ones apart (no
// terminating NUL within the buffer) and doesn't use them.
#define NAME_LEN 256

struct cgroup_name {
	char path[NAME_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct cgroup_name);
} cgroup_names SEC(".maps");

// A zeroed value to copy the path into: 256 bytes is too much for the stack
// beside the helper calls' own needs on older verifiers.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cgroup_name);
} scratch SEC(".maps");

SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(cgroup_mkdir, struct cgroup *cgrp, const char *path)
{
	__u32 zero = 0;
	struct cgroup_name *n;
	__u64 id;

	if (!in_key_hierarchy(cgrp))
		return 0;
	n = bpf_map_lookup_elem(&scratch, &zero);
	if (!n)
		return 0;
	__builtin_memset(n->path, 0, sizeof(n->path));
	if (bpf_probe_read_kernel_str(n->path, sizeof(n->path), path) < 0)
		return 0;
	id = BPF_CORE_READ(cgrp, kn, id);
	bpf_map_update_elem(&cgroup_names, &id, n, BPF_ANY);
	return 0;
}
