package workload

// Levels are the Kinds that have a label set of their own: the levels at
// which an exporter can aggregate cgroups. KindCgroup has none; plain
// cgroups keep the existing per-cgroup series.
var levels = []Kind{KindContainer, KindPod, KindVM, KindJob, KindSystemdUnit}

// levelHelp says what each level covers, for its collector.<level> flag.
var levelHelp = map[Kind]string{
	KindContainer:   "Enable per-container series (docker, containerd, CRI-O, podman).",
	KindPod:         "Enable per-pod series (Kubernetes).",
	KindVM:          "Enable per-VM series (libvirt/QEMU).",
	KindJob:         "Enable per-job series (Slurm).",
	KindSystemdUnit: "Enable per-unit series (systemd services and scopes).",
}

// LevelHelp says what a level covers, as its collector.<level> flag's help.
func LevelHelp(level Kind) string { return levelHelp[level] }

// Levels returns the aggregation levels, in a fixed order.
func Levels() []Kind { return append([]Kind(nil), levels...) }

// LabelNames returns the label names of one aggregation level (see the
// package documentation for the scheme), or nil for a Kind without one.
func LabelNames(level Kind) []string {
	switch level {
	case KindContainer:
		return []string{"container_id", "container", "pod", "namespace", "manager"}
	case KindPod:
		return []string{"pod_uid", "pod", "namespace", "qos"}
	case KindVM:
		return []string{"vm_uuid", "vm", "instance"}
	case KindJob:
		return []string{"job_id", "user", "uid", "slurm_node"}
	case KindSystemdUnit:
		return []string{"unit", "manager"}
	}
	return nil
}

// LabelValues returns id's values for LabelNames(level), and false when the
// cgroup does not belong to a workload of that level. Every cgroup of one
// workload yields the same values (a VM's vcpu cgroups and its scope, a
// job's steps and tasks, a pod's containers), so summing cgroups by these
// values gives the workload's total.
func (id Identity) LabelValues(level Kind) ([]string, bool) {
	switch level {
	case KindContainer:
		if id.Kind != KindContainer {
			return nil, false
		}
		name := id.Container
		if name == "" {
			name = id.Name
		}
		return []string{id.ID, name, id.Pod, id.Namespace, id.Manager}, true
	case KindPod:
		if id.PodUID == "" {
			return nil, false
		}
		return []string{id.PodUID, id.Pod, id.Namespace, id.QoS}, true
	case KindVM:
		if id.Kind != KindVM {
			return nil, false
		}
		return []string{id.VMUUID, id.vmLabel(), id.Instance}, true
	case KindJob:
		if id.JobID == "" {
			return nil, false
		}
		return []string{id.JobID, id.User, id.UID, id.SlurmNode}, true
	case KindSystemdUnit:
		if id.Kind != KindSystemdUnit {
			return nil, false
		}
		return []string{id.ID, id.Manager}, true
	}
	return nil, false
}

// vmLabel is the VM's display name (OpenStack's nova:name) when known,
// else its domain name.
func (id Identity) vmLabel() string {
	if id.Name != "" {
		return id.Name
	}
	return id.VMName
}
