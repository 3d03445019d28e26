package ident

// The pieces of grammar the rows of kinds (kinds.go) share.

// strong is Unless or Raise FlagStrong.
var strong = []string{FlagStrong}

// hex64 is a container id.
const hex64 = `^[0-9a-f]{64}$`

// slurmRoot is Slurm's v1 top cgroup, /slurm or /slurm_<node>.
var slurmRoot = []string{`^slurm(?:_(?P<node>[^/]+))?$`}

// Slots of Slurm's patterns (workload.SlurmPatterns).
const (
	SlotSlurmRoot  = "slurm.root"
	SlotSlurmStepd = "slurm.stepd"
	SlotSlurmUID   = "slurm.uid"
	SlotSlurmJob   = "slurm.job"
	SlotSlurmSLUID = "slurm.sluid"
	SlotSlurmStep  = "slurm.step"
	SlotSlurmTask  = "slurm.task"
)

// runtime is a container runtime's scope (systemd driver) or directory
// (cgroupfs driver): <prefix>-<id>[.scope].
func runtime(prefix, manager string) Rule {
	return Rule{Pattern: []string{`^` + prefix + `-(?P<id>[0-9a-f]{64})(?:\.scope)?$`}, Start: KindContainer, Manager: manager,
		Set: []Set{{Field: FieldID, Value: "$id"}}, Raise: strong}
}

// conmon is a container monitor's scope, <prefix>-conmon-<id>[.scope]: a
// unit of the runtime's, the container's piece "conmon".
func conmon(prefix, manager string) Rule {
	return Rule{Pattern: []string{`^` + prefix + `-conmon-[0-9a-f]{64}(?:\.scope)?$`}, Start: KindSystemdUnit, Manager: manager,
		Set: []Set{{Field: FieldID, Value: "$0"}, {Field: FieldName, Value: "$0"}, {Field: FieldPart, Value: "conmon"}}, Raise: strong}
}

// InstancePattern is an OpenStack instance's domain name (instance-<8
// hex>), Identity.Instance when a VM's name is one.
const InstancePattern = `^instance-[0-9a-f]{8}$`

// vm is a libvirt QEMU domain's cgroup: its name (group name) decoded by
// dec, its run-time id (group domid) if the pattern has one, and its
// OpenStack instance name when the name is one.
func vm(pattern string, dec Decode) Rule {
	return Rule{Pattern: []string{pattern}, Optional: []string{"domid"}, Start: KindVM, Manager: ManagerLibvirt,
		Set: []Set{{Field: FieldID, Value: "$name", Decode: dec}, {Field: FieldVMName, Value: "$name", Decode: dec},
			{Field: FieldDomainID, Value: "$domid"}, {Field: FieldVMUUID},
			{Field: FieldInstance, Value: "$name", Decode: dec, Only: InstancePattern}},
		Raise: strong, Then: "vm"}
}

// unit is a systemd unit outside any stronger workload; withUID when the
// pattern's group uid is its owner's (user-<uid>.slice, user@<uid>.service).
func unit(pattern string, withUID bool) Rule {
	r := Rule{Unless: strong, Pattern: []string{pattern}, Start: KindSystemdUnit, Manager: ManagerSystemd,
		Set: []Set{{Field: FieldID, Value: "$0"}, {Field: FieldName, Value: "$0", Decode: DecodeUnit}}}
	if withUID {
		r.Set = append(r.Set, Set{Field: FieldUID, Value: "$uid"})
	}
	return r
}
