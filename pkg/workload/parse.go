package workload

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// Config holds what a Parser can be told beyond the built-in layouts.
type Config struct {
	Slurm SlurmPatterns
}

// DefaultConfig returns the built-in layouts.
func DefaultConfig() Config { return Config{Slurm: DefaultSlurmPatterns()} }

// Parser turns cgroup paths into Identities using the path alone. It holds
// only compiled patterns and is safe for concurrent use.
type Parser struct {
	slurm slurmRules
}

// NewParser compiles cfg's patterns.
func NewParser(cfg Config) (*Parser, error) {
	s, err := compileSlurm(cfg.Slurm)
	if err != nil {
		return nil, fmt.Errorf("workload parser: %w", err)
	}
	return &Parser{slurm: s}, nil
}

// defaultParser serves Parse. It is built once and only read afterwards.
var defaultParser = func() *Parser {
	p, err := NewParser(DefaultConfig())
	if err != nil {
		panic(err) // the built-in patterns are constants; a test covers them
	}
	return p
}()

// Parse returns the identity that the cgroup path (relative to the
// hierarchy root, as in stats.Workload.Cgroup) names, using the built-in
// layouts. It never touches the file system; names that only enrichment
// knows are left empty.
func Parse(path string) ident.Identity { return defaultParser.Parse(path) }

// Built-in layouts, each matched against one whole path component. Only
// read after package initialisation.
var (
	// kubepods-burstable-pod<uid>.slice; "kubelet-kubepods-…" when kubelet
	// runs with a cgroup root (kind, k3s). Systemd-driver pod uids have
	// '_' for '-'; static pods have a 32-hex hash instead of a uuid.
	rePodSlice = regexp.MustCompile(`^(?:[^/]*-)?kubepods(?:-(burstable|besteffort))?-pod([0-9a-fA-F]{8}_[0-9a-fA-F]{4}_[0-9a-fA-F]{4}_[0-9a-fA-F]{4}_[0-9a-fA-F]{12}|[0-9a-fA-F]{32})\.slice$`)
	reQoSSlice = regexp.MustCompile(`^(?:[^/]*-)?kubepods(?:-(burstable|besteffort))?\.slice$`)
	rePodDir   = regexp.MustCompile(`^pod([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{32})$`)
	// Runtime scopes (systemd driver) and directories (cgroupfs driver
	// of CRI-O and podman). The monitors are matched first.
	reConmon    = regexp.MustCompile(`^(crio|libpod)-conmon-([0-9a-f]{64})(?:\.scope)?$`)
	reContainer = regexp.MustCompile(`^(docker|cri-containerd|crio|libpod|nerdctl)-([0-9a-f]{64})(?:\.scope)?$`)
	reHex64     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// machine-qemu\x2d<id>\x2d<name>.scope; before libvirt 3.x (2017)
	// machine-qemu\x2d<name>.scope without the id.
	reMachineID = regexp.MustCompile(`^machine-qemu\\x2d([0-9]+)\\x2d(.+)\.scope$`)
	reMachine   = regexp.MustCompile(`^machine-qemu\\x2d(.+)\.scope$`)
	// A PBS job id as its server writes it: <sequence>.<server>, an array
	// job's subjob <sequence>[<index>].<server> (or the array itself,
	// <sequence>[]) — the directory name the cgroup hook
	// (src/hooks/cgroups/pbs_cgroups.PY, _cgroup_path) joins unchanged.
	rePBSJob = regexp.MustCompile(`^[0-9]{1,12}(?:\[[0-9]{0,12}\])?\.[A-Za-z0-9][A-Za-z0-9.-]{0,254}$`)
	// libvirt without systemd: qemu-<id>-<name>.libvirt-qemu, older
	// releases <name>.libvirt-qemu.
	reLibvirtDirID = regexp.MustCompile(`^qemu-([0-9]+)-(.+)\.libvirt-qemu$`)
	reLibvirtDir   = regexp.MustCompile(`^(.+)\.libvirt-qemu$`)
	reInstance     = regexp.MustCompile(`^instance-[0-9a-f]{8}$`)
	reUserSlice    = regexp.MustCompile(`^user-([0-9]+)\.slice$`)
	reUserService  = regexp.MustCompile(`^user@([0-9]+)\.service$`)
	reUnit         = regexp.MustCompile(`^.+\.(?:service|scope|slice|socket|mount|swap)$`)
)

var runtimeManager = map[string]string{
	"docker":         ident.ManagerDocker,
	"cri-containerd": ident.ManagerContainerd,
	"nerdctl":        ident.ManagerContainerd,
	"crio":           ident.ManagerCRIO,
	"libpod":         ident.ManagerPodman,
}

// comp classifies the previous path component, the context most layouts
// need ("a 64-hex directory below a pod directory is a container").
type comp int

const (
	cOther comp = iota
	cKubepods
	cQoS
	cPod
	cDockerDir
	cSlurmRoot
	cSlurmUID
	cStepd
	cJob
	cStep
	cStepUser
	cVM
	cPBS
	cPBSJobs
)

// Parse is the method form of the package-level Parse, using p's patterns.
func (p *Parser) Parse(path string) ident.Identity {
	id, _ := p.parse(path)
	return id
}

// parse also returns the prefix of path up to the innermost workload's own
// cgroup ("" for plain cgroups), which the Resolver uses to find the
// workload's processes.
//
// Components are read from the root down. A component that starts a
// workload (container, pod, VM, job, container monitor) makes it the
// innermost one; a systemd unit does so only outside any such workload,
// because a unit inside one (a container's init.scope, say) is part of it.
// Components below the innermost workload that refine it (Slurm step and
// task, libvirt's "libvirt" level) set fields; any other becomes Part.
func (p *Parser) parse(path string) (ident.Identity, string) {
	id := ident.Identity{Kind: ident.KindCgroup}
	strong := false // the innermost workload is more than a unit
	kube, slurm := false, false
	prev := cOther
	base := ""
	var part []string
	pos := 0
	for pos < len(path) {
		end := strings.IndexByte(path[pos:], '/')
		if end < 0 {
			end = len(path)
		} else {
			end += pos
		}
		c := path[pos:end]
		pos = end + 1
		if c == "" {
			continue
		}
		// start makes c the innermost workload.
		start := func(k ident.Kind, manager, wid string) {
			id.Kind, id.Manager, id.ID, id.Name, id.Part = k, manager, wid, "", ""
			part = part[:0]
			base = path[:end]
		}
		cur := cOther
		switch {
		// Slurm: refinements of the job, then the job itself.
		case slurm && prev == cSlurmRoot && p.slurm.uid.into(c, &id.UID):
			cur = cSlurmUID
		case slurm && (prev == cSlurmRoot || prev == cSlurmUID || prev == cStepd) && p.slurm.job.into(c, &id.JobID):
			start(ident.KindJob, ident.ManagerSlurm, id.JobID)
			strong, cur = true, cJob
		case slurm && prev == cStepd && p.slurm.sluid.into(c, &id.SLUID):
			// Slurm 26.05: the job's directory is its SLUID; the
			// numeric id is left for the Resolver.
			start(ident.KindJob, ident.ManagerSlurm, id.SLUID)
			strong, cur = true, cJob
		case prev == cJob && p.slurm.step.into(c, &id.Step):
			cur = cStep
		case prev == cStep && c == "user":
			cur = cStepUser
		case prev == cStep && c == "slurm":
			part = append(part, "stepd")
		case (prev == cStep || prev == cStepUser) && p.slurm.task.into(c, &id.Task):
		case !slurm && !strong && p.slurm.root.into(c, &id.SlurmNode):
			slurm, cur = true, cSlurmRoot
			if id.Kind == ident.KindCgroup {
				id.Manager = ident.ManagerSlurm
			}
		case !slurm && !strong && p.slurm.stepd.into(c, &id.SlurmNode):
			slurm, cur = true, cStepd
			start(ident.KindSystemdUnit, ident.ManagerSystemd, c)
			id.Name = unescapeUnit(c)

		// libvirt's own level below the VM scope on cgroup v2.
		case prev == cVM && c == "libvirt":
			cur = cVM

		// Kubernetes.
		case c == "kubepods":
			kube, cur = true, cKubepods
			if !strong {
				id.Kind, id.Manager = ident.KindCgroup, ident.ManagerKubernetes
			}
		case prev == cKubepods && (c == "burstable" || c == "besteffort"):
			id.QoS, cur = c, cQoS
		case (prev == cKubepods || prev == cQoS) && rePodDir.MatchString(c):
			id.PodUID = c[len("pod"):]
			p.startPod(&id, start)
			strong, cur = true, cPod
		case rePodSlice.MatchString(c):
			m := rePodSlice.FindStringSubmatch(c)
			kube = true
			if m[1] != "" {
				id.QoS = m[1]
			}
			id.PodUID = strings.ReplaceAll(m[2], "_", "-")
			p.startPod(&id, start)
			strong, cur = true, cPod
		case !strong && reQoSSlice.MatchString(c):
			m := reQoSSlice.FindStringSubmatch(c)
			kube = true
			id.Kind, id.Manager, id.ID, id.Name, id.QoS = ident.KindCgroup, ident.ManagerKubernetes, "", "", m[1]
		case prev == cPod && reHex64.MatchString(c):
			// cgroupfs driver: the runtime is not in the path.
			start(ident.KindContainer, ident.ManagerKubernetes, c)
			strong = true

		// Container runtimes.
		case c == "docker":
			cur = cDockerDir
			if id.Kind != ident.KindCgroup {
				part = append(part, c)
			}
		case prev == cDockerDir && reHex64.MatchString(c):
			start(ident.KindContainer, ident.ManagerDocker, c)
			strong = true
		case reConmon.MatchString(c):
			m := reConmon.FindStringSubmatch(c)
			start(ident.KindSystemdUnit, runtimeManager[m[1]], c)
			id.Name, id.Part = c, "conmon"
			strong = true
		case reContainer.MatchString(c):
			m := reContainer.FindStringSubmatch(c)
			start(ident.KindContainer, runtimeManager[m[1]], m[2])
			strong = true

		// libvirt.
		case reMachineID.MatchString(c):
			m := reMachineID.FindStringSubmatch(c)
			startVM(&id, start, m[1], unescapeUnit(m[2]))
			strong, cur = true, cVM
		case reMachine.MatchString(c):
			m := reMachine.FindStringSubmatch(c)
			startVM(&id, start, "", unescapeUnit(m[1]))
			strong, cur = true, cVM
		case reLibvirtDirID.MatchString(c):
			m := reLibvirtDirID.FindStringSubmatch(c)
			startVM(&id, start, m[1], m[2])
			strong, cur = true, cVM
		case reLibvirtDir.MatchString(c):
			startVM(&id, start, "", reLibvirtDir.FindStringSubmatch(c)[1])
			strong, cur = true, cVM

		// PBS: the cgroup hook's <cgroup_prefix>.service (pbs_jobs by
		// default) holds jobid/<job> on cgroup v1 and jobs/<job> on v2.
		case !strong && c == "pbs_jobs.service":
			start(ident.KindSystemdUnit, ident.ManagerSystemd, c)
			id.Name, cur = c, cPBS
		case prev == cPBS && (c == "jobid" || c == "jobs"):
			part, cur = append(part, c), cPBSJobs
		case prev == cPBSJobs && rePBSJob.MatchString(c):
			start(ident.KindPBSJob, ident.ManagerPBS, c)
			strong = true

		// systemd units, weakest.
		case !strong && reUnit.MatchString(c):
			start(ident.KindSystemdUnit, ident.ManagerSystemd, c)
			id.Name = unescapeUnit(c)
			if m := reUserSlice.FindStringSubmatch(c); m != nil {
				id.UID = m[1]
			} else if m := reUserService.FindStringSubmatch(c); m != nil {
				id.UID = m[1]
			}

		default:
			if id.Kind != ident.KindCgroup {
				part = append(part, c)
			}
		}
		prev = cur
	}
	if kube && id.PodUID != "" && id.QoS == "" {
		id.QoS = "guaranteed" // the only class without a QoS level
	}
	if len(part) > 0 {
		if id.Part != "" {
			part = append([]string{id.Part}, part...)
		}
		id.Part = strings.Join(part, "/")
	}
	return id, base
}

func (p *Parser) startPod(id *ident.Identity, start func(ident.Kind, string, string)) {
	start(ident.KindPod, ident.ManagerKubernetes, id.PodUID)
}

func startVM(id *ident.Identity, start func(ident.Kind, string, string), domID, name string) {
	start(ident.KindVM, ident.ManagerLibvirt, name)
	id.VMName, id.DomainID, id.VMUUID = name, domID, ""
	id.Instance = ""
	if reInstance.MatchString(name) {
		id.Instance = name
	}
}
