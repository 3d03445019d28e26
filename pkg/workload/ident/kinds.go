package ident

import (
	"slices"

	"github.com/wattrace/wattrace/pkg/reading"
)

// kindRow is everything the exporter knows of one aggregation level (a
// Kind with series of its own), how workload.Parse recognises its cgroups
// included: adding a level is one row in kinds and its Kind constant (and
// an enrichment in workload.Resolver when a label comes from the
// processes; docs/architecture.md has the checklist). The parser (its
// grammar), the flag (config), the families (collector), the roll-up and
// GPU holders (stats) and the Alloy targets all read this table.
type kindRow struct {
	kind Kind
	// help is the collector.<kind> flag's help.
	help string
	// labels are the level's label names. The first is the workload's
	// id, by which the roll-up keys it, so that names learnt later do not
	// split its counters.
	labels []string
	// member says whether a cgroup of id belongs to a workload of this
	// level, and values gives its label values (one per label). Every
	// cgroup of one workload must yield the same values (a VM's vcpu
	// cgroups and its scope, a job's steps and tasks, a pod's
	// containers), so that summing cgroups by them gives the workload's
	// total.
	member func(Identity) bool
	values func(Identity) []string
	// manager is the level's `manager` in wattrace_units_running; nil
	// means the cgroup's own manager.
	manager func(Identity) string
	// holder is the GPU allocation holder kind (reading.HolderKind) that
	// is a workload of this level, "" for none; match gives the label
	// values that find the holder's workload among the level's.
	holder string
	match  func(reading.Holder) map[string]string
	// service names the workload for Pyroscope's service_name (the Alloy
	// targets); serviceRank orders the levels for it, lowest first, since
	// a cgroup can be in several (a container in a pod is named after the
	// pod's namespace).
	service     func(Identity) string
	serviceRank int
	// grammar is how the level's cgroups are recognised in their paths
	// (grammar.go): the rules of the layouts that make them.
	grammar Grammar
}

// kinds are the aggregation levels, in the order of their flags and
// families. KindCgroup has none: plain cgroups keep the per-cgroup series.
// Only read after package initialisation.
var kinds = kindTable{
	{
		kind:   KindContainer,
		help:   "Enable per-container series (docker, containerd, CRI-O, podman).",
		labels: []string{"container_id", "container", "pod", "namespace", "manager"},
		member: func(id Identity) bool { return id.Kind == KindContainer },
		values: func(id Identity) []string {
			name := id.Container
			if name == "" {
				name = id.Name
			}
			return []string{id.ID, name, id.Pod, id.Namespace, id.Manager}
		},
		service: func(id Identity) string {
			if id.Name != "" {
				return id.Name
			}
			return shortID(id.ID)
		},
		serviceRank: 1,
		grammar: Grammar{Rules: []Rule{
			// The docker daemon's cgroupfs driver: docker/<id>.
			{Is: []string{"docker"}, Part: "$0", Then: "docker"},
			{After: []string{"docker"}, Pattern: []string{hex64}, Start: KindContainer, Manager: ManagerDocker,
				Set: []Set{{Field: FieldID, Value: "$0"}}, Raise: strong},
			// Container monitors, before the containers: units of the
			// runtime's, the piece "conmon".
			conmon("crio", ManagerCRIO), conmon("libpod", ManagerPodman),
			// Runtime scopes (systemd driver) and directories
			// (cgroupfs driver of CRI-O and podman).
			runtime("docker", ManagerDocker), runtime("cri-containerd", ManagerContainerd),
			runtime("crio", ManagerCRIO), runtime("libpod", ManagerPodman), runtime("nerdctl", ManagerContainerd),
		}},
	},
	{
		kind:    KindPod,
		help:    "Enable per-pod series (Kubernetes).",
		labels:  []string{"pod_uid", "pod", "namespace", "qos"},
		member:  func(id Identity) bool { return id.PodUID != "" },
		values:  func(id Identity) []string { return []string{id.PodUID, id.Pod, id.Namespace, id.QoS} },
		manager: func(Identity) string { return ManagerKubernetes }, // whatever runs its containers
		holder:  "pod",
		match: func(h reading.Holder) map[string]string {
			return map[string]string{"namespace": h.Namespace, "pod": h.Pod}
		},
		// Pyroscope's own convention: namespace/container.
		service: func(id Identity) string {
			name := id.Container
			if name == "" || name == SandboxContainer {
				name = id.Pod
			}
			if name == "" {
				name = id.PodUID
			}
			if id.Namespace != "" {
				return id.Namespace + "/" + name
			}
			return name
		},
		serviceRank: 0,
		grammar: Grammar{
			Rules: []Rule{
				// cgroupfs driver: kubepods/[burstable|besteffort/]pod<uid>/<container id>.
				{Is: []string{"kubepods"}, Unless: strong, Plain: ManagerKubernetes, Then: "kubepods"},
				{Is: []string{"kubepods"}, If: strong, Then: "kubepods"},
				{After: []string{"kubepods"}, Is: []string{"burstable", "besteffort"}, Set: []Set{{Field: FieldQoS, Value: "$0"}}, Then: "qos"},
				{After: []string{"kubepods", "qos"},
					Pattern: []string{`^pod(?P<uid>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{32})$`},
					Start:   KindPod, Manager: ManagerKubernetes,
					Set: []Set{{Field: FieldPodUID, Value: "$uid"}, {Field: FieldID, Value: "$uid"}}, Raise: strong, Then: "pod"},
				// systemd driver: kubepods-burstable-pod<uid>.slice, with
				// "kubelet-kubepods-…" when kubelet runs with a cgroup
				// root (kind, k3s); the uid's dashes are underscores.
				// Static pods have a 32-hex hash instead of a uuid.
				{Pattern: []string{`^(?:[^/]*-)?kubepods(?:-(?P<qos>burstable|besteffort))?-pod(?P<uid>[0-9a-fA-F]{8}_[0-9a-fA-F]{4}_[0-9a-fA-F]{4}_[0-9a-fA-F]{4}_[0-9a-fA-F]{12}|[0-9a-fA-F]{32})\.slice$`},
					Start: KindPod, Manager: ManagerKubernetes,
					Set: []Set{{Field: FieldQoS, Value: "$qos", NonEmpty: true},
						{Field: FieldPodUID, Value: "$uid", Decode: DecodeDashes}, {Field: FieldID, Value: "$uid", Decode: DecodeDashes}},
					Raise: strong, Then: "pod"},
				{Unless: strong, Pattern: []string{`^(?:[^/]*-)?kubepods(?:-(?P<qos>burstable|besteffort))?\.slice$`},
					Plain: ManagerKubernetes, Set: []Set{{Field: FieldID}, {Field: FieldName}, {Field: FieldQoS, Value: "$qos"}}},
				// A container of the cgroupfs driver: the runtime is not
				// in the path.
				{After: []string{"pod"}, Pattern: []string{hex64}, Start: KindContainer, Manager: ManagerKubernetes,
					Set: []Set{{Field: FieldID, Value: "$0"}}, Raise: strong},
			},
			// Guaranteed is the only class without a QoS level.
			Finish: func(id Identity) Identity {
				if id.PodUID != "" && id.QoS == "" {
					id.QoS = "guaranteed"
				}
				return id
			},
		},
	},
	{
		kind:   KindVM,
		help:   "Enable per-VM series (libvirt/QEMU).",
		labels: []string{"vm_uuid", "vm", "instance"},
		member: func(id Identity) bool { return id.Kind == KindVM },
		values: func(id Identity) []string { return []string{id.VMUUID, id.vmLabel(), id.Instance} },
		holder: "vm",
		match: func(h reading.Holder) map[string]string {
			if h.VMUUID != "" {
				return map[string]string{"vm_uuid": h.VMUUID}
			}
			return map[string]string{"vm": h.VMName}
		},
		service: func(id Identity) string {
			if id.Name != "" {
				return "vm/" + id.Name
			}
			if id.VMName != "" {
				return "vm/" + id.VMName
			}
			return "vm/" + id.ID
		},
		serviceRank: 3,
		grammar: Grammar{Rules: []Rule{
			// libvirt's own level below the VM scope on cgroup v2.
			{After: []string{"vm"}, Is: []string{"libvirt"}, Then: "vm"},
			// machine-qemu\x2d<id>\x2d<name>.scope; before libvirt 3.x
			// (2017) machine-qemu\x2d<name>.scope without the id.
			vm(`^machine-qemu\\x2d(?P<domid>[0-9]+)\\x2d(?P<name>.+)\.scope$`, DecodeUnit),
			vm(`^machine-qemu\\x2d(?P<name>.+)\.scope$`, DecodeUnit),
			// libvirt without systemd: qemu-<id>-<name>.libvirt-qemu,
			// older releases <name>.libvirt-qemu.
			vm(`^qemu-(?P<domid>[0-9]+)-(?P<name>.+)\.libvirt-qemu$`, DecodeNone),
			vm(`^(?P<name>.+)\.libvirt-qemu$`, DecodeNone),
		}},
	},
	{
		kind: KindJob,
		help: "Enable per-job series (Slurm).",
		// sluid last: job_id keeps naming the numeric id, and a job
		// named by its SLUID whose numeric id is not known (yet) is
		// still a job of its own, keyed by all its values.
		labels: []string{"job_id", "user", "uid", "slurm_node", "sluid"},
		member: func(id Identity) bool { return id.JobID != "" || id.SLUID != "" },
		values: func(id Identity) []string { return []string{id.JobID, id.User, id.UID, id.SlurmNode, id.SLUID} },
		holder: "slurm",
		match:  func(h reading.Holder) map[string]string { return map[string]string{"job_id": h.JobID} },
		// One job runs many executables: the job is the service.
		service: func(id Identity) string {
			if id.JobID == "" {
				return "slurm/" + id.SLUID
			}
			return "slurm/" + id.JobID
		},
		serviceRank: 2,
		// Slurm's root and step daemon scope are broad patterns that must
		// win over every other layout's.
		grammar: Grammar{Rank: RankFirst, Rules: []Rule{
			// Refinements of the job, then the job itself.
			{After: []string{"slurm.root"}, Slot: SlotSlurmUID, Pattern: []string{`^uid_(?P<uid>[0-9]+)$`},
				Set: []Set{{Field: FieldUID, Value: "$uid"}}, Then: "slurm.uid"},
			{After: []string{"slurm.root", "slurm.uid", "slurm.stepd"}, Slot: SlotSlurmJob, Pattern: []string{`^job_(?P<job>[0-9]+)$`},
				Start: KindJob, Manager: ManagerSlurm, Set: []Set{{Field: FieldJobID, Value: "$job"}, {Field: FieldID, Value: "$job"}},
				Raise: strong, Then: "slurm.job"},
			// Slurm 26.05: the job's directory is its SLUID; the numeric
			// id is left for the Resolver.
			{After: []string{"slurm.stepd"}, Slot: SlotSlurmSLUID, Pattern: []string{`^(?P<sluid>s[0-9A-F][0-9A-HJKMNP-TV-Z]{12})$`},
				Start: KindJob, Manager: ManagerSlurm, Set: []Set{{Field: FieldSLUID, Value: "$sluid"}, {Field: FieldID, Value: "$sluid"}},
				Raise: strong, Then: "slurm.job"},
			{After: []string{"slurm.job"}, Slot: SlotSlurmStep, Pattern: []string{`^step_(?P<step>[0-9]+(?:\.[0-9]+)?|batch|extern|interactive)$`},
				Set: []Set{{Field: FieldStep, Value: "$step"}}, Then: "slurm.step"},
			{After: []string{"slurm.step"}, Is: []string{"user"}, Then: "slurm.user"},
			{After: []string{"slurm.step"}, Is: []string{"slurm"}, Part: "stepd"},
			{After: []string{"slurm.step", "slurm.user"}, Slot: SlotSlurmTask, Pattern: []string{`^task_(?P<task>[0-9]+|special)$`},
				Set: []Set{{Field: FieldTask, Value: "$task"}}},
			// v1: /slurm or /slurm_<node>, the cgroup Slurm's when in no
			// workload.
			{Unless: []string{"slurm", FlagStrong, FlagWorkload}, Slot: SlotSlurmRoot, Pattern: slurmRoot, Optional: []string{"node"},
				Plain: ManagerSlurm, Set: []Set{{Field: FieldSlurmNode, Value: "$node"}}, Raise: []string{"slurm"}, Then: "slurm.root"},
			{If: []string{FlagWorkload}, Unless: []string{"slurm", FlagStrong}, Slot: SlotSlurmRoot, Pattern: slurmRoot, Optional: []string{"node"},
				Set: []Set{{Field: FieldSlurmNode, Value: "$node"}}, Raise: []string{"slurm"}, Then: "slurm.root"},
			// v2: [<node>_]slurmstepd.scope, a unit of its own.
			{Unless: []string{"slurm", FlagStrong}, Slot: SlotSlurmStepd, Pattern: []string{`^(?:(?P<node>[^/]+)_)?slurmstepd\.scope$`}, Optional: []string{"node"},
				Start: KindSystemdUnit, Manager: ManagerSystemd,
				Set:   []Set{{Field: FieldSlurmNode, Value: "$node"}, {Field: FieldID, Value: "$0"}, {Field: FieldName, Value: "$0", Decode: DecodeUnit}},
				Raise: []string{"slurm"}, Then: "slurm.stepd"},
		}},
	},
	{
		kind: KindPBSJob,
		help: "Enable per-job series of PBS Professional and OpenPBS (its cgroup hook).",
		// The same names as a Slurm job's, so dashboards and the units
		// server read both alike; the family tells the batch system.
		labels: []string{"job_id", "user", "uid"},
		member: func(id Identity) bool { return id.Kind == KindPBSJob },
		values: func(id Identity) []string { return []string{id.ID, id.User, id.UID} },
		// One job runs many executables: the job is the service.
		service:     func(id Identity) string { return "pbs/" + id.ID },
		serviceRank: 5,
		// The cgroup hook's <cgroup_prefix>.service (pbs_jobs by default)
		// holds jobid/<job> on cgroup v1 and jobs/<job> on v2.
		grammar: Grammar{Rules: []Rule{
			{Unless: strong, Is: []string{"pbs_jobs.service"}, Start: KindSystemdUnit, Manager: ManagerSystemd,
				Set: []Set{{Field: FieldID, Value: "$0"}, {Field: FieldName, Value: "$0"}}, Then: "pbs"},
			{After: []string{"pbs"}, Is: []string{"jobid", "jobs"}, Part: "$0", Then: "pbs.jobs"},
			// A PBS job id as its server writes it: <sequence>.<server>,
			// an array job's subjob <sequence>[<index>].<server> (or the
			// array itself, <sequence>[]): the directory name the cgroup
			// hook (src/hooks/cgroups/pbs_cgroups.PY, _cgroup_path) joins
			// unchanged.
			{After: []string{"pbs.jobs"}, Pattern: []string{`^[0-9]{1,12}(?:\[[0-9]{0,12}\])?\.[A-Za-z0-9][A-Za-z0-9.-]{0,254}$`},
				Start: KindPBSJob, Manager: ManagerPBS, Set: []Set{{Field: FieldID, Value: "$0"}}, Raise: strong},
		}},
	},
	{
		kind:   KindSystemdUnit,
		help:   "Enable per-unit series (systemd services and scopes).",
		labels: []string{"unit", "manager"},
		member: func(id Identity) bool { return id.Kind == KindSystemdUnit },
		values: func(id Identity) []string { return []string{id.ID, id.Manager} },
		service: func(id Identity) string {
			if id.Name != "" {
				return id.Name
			}
			return id.ID
		},
		serviceRank: 4,
		// The weakest: any other layout's cgroup may look like a unit, and
		// a unit inside another workload is a piece of it.
		grammar: Grammar{Rank: RankLast, Rules: []Rule{
			unit(`^user-(?P<uid>[0-9]+)\.slice$`, true),
			unit(`^user@(?P<uid>[0-9]+)\.service$`, true),
			unit(`^.+\.(?:service|scope|slice|socket|mount|swap)$`, false),
		}},
	},
}

// kindTable answers every question about levels from its rows; the
// package-level functions ask the built-in table, and a test can build
// another.
type kindTable []kindRow

func (t kindTable) row(k Kind) (kindRow, bool) {
	for _, r := range t {
		if r.kind == k {
			return r, true
		}
	}
	return kindRow{}, false
}

func (t kindTable) levels() []Kind {
	out := make([]Kind, len(t))
	for i, r := range t {
		out[i] = r.kind
	}
	return out
}

func (t kindTable) labelValues(id Identity, level Kind) ([]string, bool) {
	r, ok := t.row(level)
	if !ok || !r.member(id) {
		return nil, false
	}
	return r.values(id), true
}

func (t kindTable) holderMatch(h reading.Holder) (Kind, map[string]string) {
	for _, r := range t {
		if r.holder != "" && r.holder == string(h.Kind) {
			return r.kind, r.match(h)
		}
	}
	return "", nil
}

func (t kindTable) serviceName(id Identity) string {
	best := -1
	for i, r := range t {
		if r.member(id) && (best < 0 || r.serviceRank < t[best].serviceRank) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return t[best].service(id)
}

// Levels returns the aggregation levels, in a fixed order.
func Levels() []Kind { return kinds.levels() }

// LevelHelp says what a level covers, as its collector.<level> flag's help.
func LevelHelp(level Kind) string {
	r, _ := kinds.row(level)
	return r.help
}

// LabelNames returns the label names of one aggregation level (see the
// package documentation for the scheme), or nil for a Kind without one.
func LabelNames(level Kind) []string {
	r, _ := kinds.row(level)
	return slices.Clone(r.labels)
}

// LabelValues returns id's values for LabelNames(level), and false when the
// cgroup does not belong to a workload of that level. Every cgroup of one
// workload yields the same values, so summing cgroups by these values gives
// the workload's total.
func (id Identity) LabelValues(level Kind) ([]string, bool) { return kinds.labelValues(id, level) }

// ManagerAt names the manager of id's workload at level, as
// wattrace_units_running counts it: a container's runtime for containers,
// kubernetes for pods (whatever runs their containers).
func ManagerAt(level Kind, id Identity) string {
	if r, ok := kinds.row(level); ok && r.manager != nil {
		return r.manager(id)
	}
	return id.Manager
}

// HolderMatch names the level and label values of the workload that a GPU
// allocation holder is (a Slurm job, a pod, a VM), or "" when no level
// takes that holder kind.
func HolderMatch(h reading.Holder) (Kind, map[string]string) { return kinds.holderMatch(h) }

// ServiceName names a workload for Pyroscope's service_name: Pyroscope
// groups profiles by it, so it is the unit a user looks for. Kubernetes
// containers follow Pyroscope's own convention, namespace/container;
// Slurm jobs are slurm/<job id>; VMs vm/<name>; containers outside pods
// their name or short id; systemd units their unit name. "" when id names
// no workload, so the caller keeps the comm.
func ServiceName(id Identity) string { return kinds.serviceName(id) }

// vmLabel is the VM's display name (OpenStack's nova:name) when known,
// else its domain name.
func (id Identity) vmLabel() string {
	if id.Name != "" {
		return id.Name
	}
	return id.VMName
}

// shortID is a container id as docker ps shows it.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
