// Package workload resolves cgroup paths to the workloads that own them:
// containers (docker, containerd, CRI-O, podman), Kubernetes pods, libvirt
// VMs, Slurm and PBS jobs and systemd units, on cgroup v1, v2 and hybrid
// hosts.
//
// Parse reads the path alone. A Resolver adds names from enrichment
// sources (passwd for user names, libvirt's XML or the QEMU command line
// for VM names and uuids, the kubelet for pod and container names through
// package kube) and caches the result per path: once an identity is
// complete, resolving the path again is a map lookup. Incomplete ones (the
// kubelet has not listed the pod yet) are retried with backoff, from 1s to
// 5min, and never block: callers get the path-derived ids meanwhile.
//
// # Layouts
//
// Each level's layouts are its path grammar, in its row of the kinds table
// (package ident, kinds.go; grammar.go there says how a grammar is read),
// and the Parser walks them all without knowing any; see the tables in
// parse_test.go for every layout with real paths, and testdata/parse.golden
// for what each fixture path resolves to. In
// short: the innermost container, pod, VM, Slurm job or container monitor
// in the path is the workload (a systemd unit only when there is none: a
// unit inside a container is part of it), fields of enclosing workloads
// are kept (a container's pod uid), and components below the workload's
// own cgroup become Identity.Part. Slurm's patterns are configurable; see
// SlurmPatterns for how to add one for a new release.
//
// # Label scheme
//
// One family per level, e.g. wattrace_container_energy_joules_total, each
// with the level's labels followed by the usual zone, source, method,
// mode. ident.LabelNames and ident.Identity.LabelValues give them, from
// the kinds table in package ident (one row a level: labels, flag help,
// GPU holder, Alloy service name); summing a level's cgroups by these
// values gives each workload's total, because every cgroup of a workload
// yields the same values:
//
//	container  container_id, container, pod, namespace, manager
//	pod        pod_uid, pod, namespace, qos
//	vm         vm_uuid, vm, instance
//	job        job_id, user, uid, slurm_node, sluid
//	pbs_job    job_id, user, uid
//	unit       unit, manager
//
// A cgroup belongs to every level it has fields for: a container in a pod
// is summed into its container series and its pod series; a container
// monitor (conmon) into its pod and unit series but not the container's; a
// VM's emulator and vcpu cgroups into one VM series. Plain cgroups (and
// every cgroup) keep the existing wattrace_cgroup_* series.
//
// Cardinality: each series lives as long as its workload (plus the
// exporter's retention); ids are the keys and names ride along, since they
// are functionally dependent on the id and add no series. Deliberately
// left out: the Slurm step and task (srun loops start thousands of steps
// per job; Identity.Step is there for an opt-in step level), the VM's
// part (vcpu0…: summed), the pod's container for the pod level, the
// runtime's image. Unit series follow systemd's own churn (session-N.scope
// numbers grow), no worse than the existing cgroup label. Labels filled by
// enrichment can change once, from "" to the name, when the source answers
// after the workload's first interval; a short-lived duplicate series is
// the price of never blocking the stats loop.
package workload
