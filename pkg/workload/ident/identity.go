package ident

// Kind is what a cgroup is, as far as its path and the enrichment sources
// tell.
type Kind string

// The kinds workload.Parse and workload.Resolver report.
const (
	KindContainer   Kind = "container"
	KindPod         Kind = "pod"
	KindVM          Kind = "vm"
	KindJob         Kind = "job"
	KindSystemdUnit Kind = "unit"
	KindPBSJob      Kind = "pbs_job"
	KindCgroup      Kind = "cgroup"
)

// Managers, the Identity.Manager values.
const (
	ManagerDocker     = "docker"
	ManagerContainerd = "containerd"
	ManagerCRIO       = "crio"
	ManagerPodman     = "podman"
	ManagerKubernetes = "kubernetes"
	ManagerSlurm      = "slurm"
	ManagerLibvirt    = "libvirt"
	ManagerSystemd    = "systemd"
	ManagerPBS        = "pbs"
)

// SandboxContainer is Identity.Container for a pod's sandbox ("pause")
// container, the name cAdvisor and the dockershim gave it.
const SandboxContainer = "POD"

// Identity is the workload that owns one cgroup.
//
// It is flat: a cgroup carries the fields of every workload it belongs to,
// so a container in a pod has its own ID and also PodUID, Pod and Namespace,
// and a Slurm task has JobID, Step and Task. Owner derives the enclosing
// workload from these fields. There is deliberately no Parent pointer: the
// flat struct is comparable (usable as a map key when aggregating), costs no
// allocation per level, and one level of nesting is all the layouts have.
//
// Fields that come from enrichment (names, VM uuid, v2 Slurm uid) are empty
// until the source answers; workload.Resolver keeps asking for a while.
type Identity struct {
	// Kind of the innermost workload the cgroup belongs to.
	Kind Kind
	// Manager is who created the cgroup: docker, containerd, crio, podman,
	// kubernetes (a pod, or a container whose runtime the path does not
	// name), slurm, libvirt, systemd; "" for plain cgroups.
	Manager string
	// ID identifies the workload within its manager: container id, pod
	// uid, job id (a Slurm job's SLUID until its numeric id is known; a
	// PBS job's id as qstat writes it, 12345.server), VM uuid (the
	// path's VM name until the uuid is known), unit name as written in
	// the path.
	ID string
	// Name is the human name where known: container name, pod name, VM
	// display name, unit name with systemd escapes decoded.
	Name string
	// Part names the piece of the workload this cgroup is, when it is not
	// the workload's own top cgroup: a VM's "emulator", "vcpu0",
	// "iothread1"; a Slurm step's "stepd" (slurmstepd itself); "conmon"
	// for a container monitor; otherwise the components below the
	// workload's cgroup, joined by "/". Empty for the workload's own cgroup.
	Part string

	// UID and User own the workload where the path says so (Slurm v1
	// uid_<n>, user-<n>.slice) or, for Slurm on cgroup v2 and PBS jobs,
	// where the workload.Resolver found it from the job's processes. User
	// comes from passwd.
	UID  string
	User string

	// Kubernetes. PodUID is set for every cgroup inside a pod; underscores
	// of the systemd driver's slice names are turned back into dashes.
	PodUID    string
	Pod       string
	Namespace string
	Container string // container name in the pod spec; SandboxContainer for the sandbox
	QoS       string // guaranteed, burstable, besteffort

	// Slurm. JobID is the numeric job id; SLUID the job's Slurm
	// lexicographically-sortable unique id (Slurm 26.05, "s" and 13
	// Crockford base32 digits), where the path names the job by it.
	JobID     string
	SLUID     string
	Step      string // 0, 1, …, batch, extern, interactive
	Task      string // 0, 1, …, special
	SlurmNode string // the slurmd's node name when several run on one host

	// libvirt.
	VMName string // domain name (from the path possibly sanitized and truncated until the XML is read)
	VMUUID string
	// VMVCPUs and VMMemoryKiB are a VM's allocation as libvirt's domain
	// XML says; 0 when not known.
	VMVCPUs     int
	VMMemoryKiB uint64
	DomainID    string // libvirt's run-time domain id, from the path
	Instance    string // OpenStack instance name (instance-<8 hex>) when the domain is one
}

// Owner returns the workload that encloses id: the pod of a container (or
// of a container monitor in a pod), the job of a Slurm step or task, the VM
// of a VM's emulator or vcpu cgroup, the container of a cgroup nested in a
// container. It returns false when id is already a top-level workload.
func (id Identity) Owner() (Identity, bool) {
	switch {
	case id.Kind == KindJob && (id.Step != "" || id.Part != ""):
		oid := id.JobID
		if oid == "" {
			oid = id.SLUID
		}
		return Identity{Kind: KindJob, Manager: ManagerSlurm, ID: oid, UID: id.UID, User: id.User,
			JobID: id.JobID, SLUID: id.SLUID, SlurmNode: id.SlurmNode}, true
	case id.Kind == KindVM && id.Part != "":
		o := id
		o.Part = ""
		return o, true
	case id.Kind == KindContainer && id.Part != "":
		o := id
		o.Part = ""
		return o, true
	case id.PodUID != "" && id.Kind != KindPod:
		return Identity{Kind: KindPod, Manager: ManagerKubernetes, ID: id.PodUID, Name: id.Pod,
			PodUID: id.PodUID, Pod: id.Pod, Namespace: id.Namespace, QoS: id.QoS}, true
	}
	return Identity{}, false
}
