package workload

// The parser as it was before the layouts became rows of the kinds table
// (ident/kinds.go): one switch case per layout. It stays here, in the
// tests only, until the table-driven parser has been shown to agree with
// it (TestLegacyAgrees, FuzzParseAgainstLegacy) and BenchmarkParseLegacy
// has given its cost.

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// legacySlurmPatterns are the built-in Slurm patterns as the switch's
// parser had them.
func legacySlurmPatterns() SlurmPatterns {
	return SlurmPatterns{
		Root:  []string{`^slurm(?:_(?P<node>[^/]+))?$`},
		Stepd: []string{`^(?:(?P<node>[^/]+)_)?slurmstepd\.scope$`},
		UID:   []string{`^uid_(?P<uid>[0-9]+)$`},
		Job:   []string{`^job_(?P<job>[0-9]+)$`},
		SLUID: []string{`^(?P<sluid>s[0-9A-F][0-9A-HJKMNP-TV-Z]{12})$`},
		Step:  []string{`^step_(?P<step>[0-9]+(?:\.[0-9]+)?|batch|extern|interactive)$`},
		Task:  []string{`^task_(?P<task>[0-9]+|special)$`},
	}
}

type legacyParser struct {
	slurm slurmRules
}

func newLegacyParser(cfg Config) (*legacyParser, error) {
	s, err := compileSlurm(cfg.Slurm)
	if err != nil {
		return nil, fmt.Errorf("workload parser: %w", err)
	}
	return &legacyParser{slurm: s}, nil
}

// Built-in layouts, each matched against one whole path component. Only
// read after package initialisation.
var (
	// kubepods-burstable-pod<uid>.slice; "kubelet-kubepods-…" when kubelet
	// runs with a cgroup root (kind, k3s). Systemd-driver pod uids have
	// '_' for '-'; static pods have a 32-hex hash instead of a uuid.
	legacyRePodSlice = regexp.MustCompile(`^(?:[^/]*-)?kubepods(?:-(burstable|besteffort))?-pod([0-9a-fA-F]{8}_[0-9a-fA-F]{4}_[0-9a-fA-F]{4}_[0-9a-fA-F]{4}_[0-9a-fA-F]{12}|[0-9a-fA-F]{32})\.slice$`)
	legacyReQoSSlice = regexp.MustCompile(`^(?:[^/]*-)?kubepods(?:-(burstable|besteffort))?\.slice$`)
	legacyRePodDir   = regexp.MustCompile(`^pod([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{32})$`)
	// Runtime scopes (systemd driver) and directories (cgroupfs driver
	// of CRI-O and podman). The monitors are matched first.
	legacyReConmon    = regexp.MustCompile(`^(crio|libpod)-conmon-([0-9a-f]{64})(?:\.scope)?$`)
	legacyReContainer = regexp.MustCompile(`^(docker|cri-containerd|crio|libpod|nerdctl)-([0-9a-f]{64})(?:\.scope)?$`)
	legacyReHex64     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// machine-qemu\x2d<id>\x2d<name>.scope; before libvirt 3.x (2017)
	// machine-qemu\x2d<name>.scope without the id.
	legacyReMachineID = regexp.MustCompile(`^machine-qemu\\x2d([0-9]+)\\x2d(.+)\.scope$`)
	legacyReMachine   = regexp.MustCompile(`^machine-qemu\\x2d(.+)\.scope$`)
	// A PBS job id as its server writes it: <sequence>.<server>, an array
	// job's subjob <sequence>[<index>].<server> (or the array itself,
	// <sequence>[]) — the directory name the cgroup hook
	// (src/hooks/cgroups/pbs_cgroups.PY, _cgroup_path) joins unchanged.
	legacyRePBSJob = regexp.MustCompile(`^[0-9]{1,12}(?:\[[0-9]{0,12}\])?\.[A-Za-z0-9][A-Za-z0-9.-]{0,254}$`)
	// libvirt without systemd: qemu-<id>-<name>.libvirt-qemu, older
	// releases <name>.libvirt-qemu.
	legacyReLibvirtDirID = regexp.MustCompile(`^qemu-([0-9]+)-(.+)\.libvirt-qemu$`)
	legacyReLibvirtDir   = regexp.MustCompile(`^(.+)\.libvirt-qemu$`)
	legacyReInstance     = regexp.MustCompile(`^instance-[0-9a-f]{8}$`)
	legacyReUserSlice    = regexp.MustCompile(`^user-([0-9]+)\.slice$`)
	legacyReUserService  = regexp.MustCompile(`^user@([0-9]+)\.service$`)
	legacyReUnit         = regexp.MustCompile(`^.+\.(?:service|scope|slice|socket|mount|swap)$`)
)

var legacyRuntimeManager = map[string]string{
	"docker":         ident.ManagerDocker,
	"cri-containerd": ident.ManagerContainerd,
	"nerdctl":        ident.ManagerContainerd,
	"crio":           ident.ManagerCRIO,
	"libpod":         ident.ManagerPodman,
}

// lComp classifies the previous path component, the context most layouts
// need ("a 64-hex directory below a pod directory is a container").
type lComp int

const (
	lCOther lComp = iota
	lCKubepods
	lCQoS
	lCPod
	lCDockerDir
	lCSlurmRoot
	lCSlurmUID
	lCStepd
	lCJob
	lCStep
	lCStepUser
	lCVM
	lCPBS
	lCPBSJobs
)

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
func (p *legacyParser) parse(path string) (ident.Identity, string) {
	id := ident.Identity{Kind: ident.KindCgroup}
	strong := false // the innermost workload is more than a unit
	kube, slurm := false, false
	prev := lCOther
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
		cur := lCOther
		switch {
		// Slurm: refinements of the job, then the job itself.
		case slurm && prev == lCSlurmRoot && p.slurm.uid.into(c, &id.UID):
			cur = lCSlurmUID
		case slurm && (prev == lCSlurmRoot || prev == lCSlurmUID || prev == lCStepd) && p.slurm.job.into(c, &id.JobID):
			start(ident.KindJob, ident.ManagerSlurm, id.JobID)
			strong, cur = true, lCJob
		case slurm && prev == lCStepd && p.slurm.sluid.into(c, &id.SLUID):
			// Slurm 26.05: the job's directory is its SLUID; the
			// numeric id is left for the Resolver.
			start(ident.KindJob, ident.ManagerSlurm, id.SLUID)
			strong, cur = true, lCJob
		case prev == lCJob && p.slurm.step.into(c, &id.Step):
			cur = lCStep
		case prev == lCStep && c == "user":
			cur = lCStepUser
		case prev == lCStep && c == "slurm":
			part = append(part, "stepd")
		case (prev == lCStep || prev == lCStepUser) && p.slurm.task.into(c, &id.Task):
		case !slurm && !strong && p.slurm.root.into(c, &id.SlurmNode):
			slurm, cur = true, lCSlurmRoot
			if id.Kind == ident.KindCgroup {
				id.Manager = ident.ManagerSlurm
			}
		case !slurm && !strong && p.slurm.stepd.into(c, &id.SlurmNode):
			slurm, cur = true, lCStepd
			start(ident.KindSystemdUnit, ident.ManagerSystemd, c)
			id.Name = unescapeUnit(c)

		// libvirt's own level below the VM scope on cgroup v2.
		case prev == lCVM && c == "libvirt":
			cur = lCVM

		// Kubernetes.
		case c == "kubepods":
			kube, cur = true, lCKubepods
			if !strong {
				id.Kind, id.Manager = ident.KindCgroup, ident.ManagerKubernetes
			}
		case prev == lCKubepods && (c == "burstable" || c == "besteffort"):
			id.QoS, cur = c, lCQoS
		case (prev == lCKubepods || prev == lCQoS) && legacyRePodDir.MatchString(c):
			id.PodUID = c[len("pod"):]
			p.startPod(&id, start)
			strong, cur = true, lCPod
		case legacyRePodSlice.MatchString(c):
			m := legacyRePodSlice.FindStringSubmatch(c)
			kube = true
			if m[1] != "" {
				id.QoS = m[1]
			}
			id.PodUID = strings.ReplaceAll(m[2], "_", "-")
			p.startPod(&id, start)
			strong, cur = true, lCPod
		case !strong && legacyReQoSSlice.MatchString(c):
			m := legacyReQoSSlice.FindStringSubmatch(c)
			kube = true
			id.Kind, id.Manager, id.ID, id.Name, id.QoS = ident.KindCgroup, ident.ManagerKubernetes, "", "", m[1]
		case prev == lCPod && legacyReHex64.MatchString(c):
			// cgroupfs driver: the runtime is not in the path.
			start(ident.KindContainer, ident.ManagerKubernetes, c)
			strong = true

		// Container runtimes.
		case c == "docker":
			cur = lCDockerDir
			if id.Kind != ident.KindCgroup {
				part = append(part, c)
			}
		case prev == lCDockerDir && legacyReHex64.MatchString(c):
			start(ident.KindContainer, ident.ManagerDocker, c)
			strong = true
		case legacyReConmon.MatchString(c):
			m := legacyReConmon.FindStringSubmatch(c)
			start(ident.KindSystemdUnit, legacyRuntimeManager[m[1]], c)
			id.Name, id.Part = c, "conmon"
			strong = true
		case legacyReContainer.MatchString(c):
			m := legacyReContainer.FindStringSubmatch(c)
			start(ident.KindContainer, legacyRuntimeManager[m[1]], m[2])
			strong = true

		// libvirt.
		case legacyReMachineID.MatchString(c):
			m := legacyReMachineID.FindStringSubmatch(c)
			legacyStartVM(&id, start, m[1], unescapeUnit(m[2]))
			strong, cur = true, lCVM
		case legacyReMachine.MatchString(c):
			m := legacyReMachine.FindStringSubmatch(c)
			legacyStartVM(&id, start, "", unescapeUnit(m[1]))
			strong, cur = true, lCVM
		case legacyReLibvirtDirID.MatchString(c):
			m := legacyReLibvirtDirID.FindStringSubmatch(c)
			legacyStartVM(&id, start, m[1], m[2])
			strong, cur = true, lCVM
		case legacyReLibvirtDir.MatchString(c):
			legacyStartVM(&id, start, "", legacyReLibvirtDir.FindStringSubmatch(c)[1])
			strong, cur = true, lCVM

		// PBS: the cgroup hook's <cgroup_prefix>.service (pbs_jobs by
		// default) holds jobid/<job> on cgroup v1 and jobs/<job> on v2.
		case !strong && c == "pbs_jobs.service":
			start(ident.KindSystemdUnit, ident.ManagerSystemd, c)
			id.Name, cur = c, lCPBS
		case prev == lCPBS && (c == "jobid" || c == "jobs"):
			part, cur = append(part, c), lCPBSJobs
		case prev == lCPBSJobs && legacyRePBSJob.MatchString(c):
			start(ident.KindPBSJob, ident.ManagerPBS, c)
			strong = true

		// systemd units, weakest.
		case !strong && legacyReUnit.MatchString(c):
			start(ident.KindSystemdUnit, ident.ManagerSystemd, c)
			id.Name = unescapeUnit(c)
			if m := legacyReUserSlice.FindStringSubmatch(c); m != nil {
				id.UID = m[1]
			} else if m := legacyReUserService.FindStringSubmatch(c); m != nil {
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

func (p *legacyParser) startPod(id *ident.Identity, start func(ident.Kind, string, string)) {
	start(ident.KindPod, ident.ManagerKubernetes, id.PodUID)
}

func legacyStartVM(id *ident.Identity, start func(ident.Kind, string, string), domID, name string) {
	start(ident.KindVM, ident.ManagerLibvirt, name)
	id.VMName, id.DomainID, id.VMUUID = name, domID, ""
	id.Instance = ""
	if legacyReInstance.MatchString(name) {
		id.Instance = name
	}
}

// pattern is one compiled alternative and the index of the group it reads
// (0 when the group is optional and absent from this pattern).
type lPattern struct {
	re    *regexp.Regexp
	group int
}

type lPatterns []lPattern

// into matches comp and stores the captured value into dst, reporting
// whether it matched, so a switch case can match and record in one.
func (ps lPatterns) into(comp string, dst *string) bool {
	v, ok := ps.match(comp)
	if ok {
		*dst = v
	}
	return ok
}

// match returns whether comp matches and the named group's text ("" when
// the group did not take part).
func (ps lPatterns) match(comp string) (string, bool) {
	for _, p := range ps {
		m := p.re.FindStringSubmatchIndex(comp)
		if m == nil {
			continue
		}
		if p.group == 0 || m[2*p.group] < 0 {
			return "", true
		}
		return comp[m[2*p.group]:m[2*p.group+1]], true
	}
	return "", false
}

type slurmRules struct {
	root, stepd, uid, job, sluid, step, task lPatterns
}

func compileSlurm(sp SlurmPatterns) (slurmRules, error) {
	var r slurmRules
	var err error
	for _, f := range []struct {
		field    string
		src      []string
		group    string
		required bool
		dst      *lPatterns
	}{
		{"Root", sp.Root, "node", false, &r.root},
		{"Stepd", sp.Stepd, "node", false, &r.stepd},
		{"UID", sp.UID, "uid", true, &r.uid},
		{"Job", sp.Job, "job", true, &r.job},
		{"SLUID", sp.SLUID, "sluid", true, &r.sluid},
		{"Step", sp.Step, "step", true, &r.step},
		{"Task", sp.Task, "task", true, &r.task},
	} {
		if *f.dst, err = compilePatterns(f.src, f.group, f.required); err != nil {
			return slurmRules{}, fmt.Errorf("slurm %s pattern: %w", f.field, err)
		}
	}
	return r, nil
}

func compilePatterns(src []string, group string, required bool) (lPatterns, error) {
	out := make(lPatterns, 0, len(src))
	for _, s := range src {
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("compile %q: %w", s, err)
		}
		g := re.SubexpIndex(group)
		if g < 0 {
			if required {
				return nil, fmt.Errorf("%q has no (?P<%s>…) group", s, group)
			}
			g = 0
		}
		out = append(out, lPattern{re: re, group: g})
	}
	return out, nil
}

func mustLegacy(t testing.TB) *legacyParser {
	lp, err := newLegacyParser(Config{Slurm: legacySlurmPatterns()})
	if err != nil {
		t.Fatal(err)
	}
	return lp
}

// TestLegacyAgrees: over every fixture path, the table-driven parser makes
// of the path exactly what the switch's made of it, identity and workload
// cgroup both.
func TestLegacyAgrees(t *testing.T) {
	lp := mustLegacy(t)
	if got, want := DefaultSlurmPatterns(), legacySlurmPatterns(); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultSlurmPatterns\n got %q\nwant %q", got, want)
	}
	paths := fixturePaths(t)
	for _, p := range paths {
		id, base := defaultParser.parse(p)
		lid, lbase := lp.parse(p)
		if id != lid || base != lbase {
			t.Errorf("%q\n got %s\nwant %s", p, describe(p, id, base), describe(p, lid, lbase))
		}
	}
	t.Logf("%d paths agree", len(paths))
	// With a custom Slurm pattern too.
	cfg := DefaultConfig()
	cfg.Slurm.Job = append(cfg.Slurm.Job, `^jobid(?P<job>[0-9]+)$`)
	np, err := NewParser(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lcfg := Config{Slurm: legacySlurmPatterns()}
	lcfg.Slurm.Job = cfg.Slurm.Job
	lcp, err := newLegacyParser(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(paths, "/system.slice/slurmstepd.scope/jobid7/step_0/user/task_0", "/slurm/uid_1/jobid8/step_1/task_2") {
		id, base := np.parse(p)
		lid, lbase := lcp.parse(p)
		if id != lid || base != lbase {
			t.Errorf("custom: %q\n got %s\nwant %s", p, describe(p, id, base), describe(p, lid, lbase))
		}
	}
}

// FuzzParseAgainstLegacy: on any path, the two parsers agree.
func FuzzParseAgainstLegacy(f *testing.F) {
	for _, p := range fixturePaths(f) {
		f.Add(p)
	}
	lp := mustLegacy(f)
	f.Fuzz(func(t *testing.T, path string) {
		id, base := defaultParser.parse(path)
		lid, lbase := lp.parse(path)
		if id != lid || base != lbase {
			t.Fatalf("%q\n got %s\nwant %s", path, describe(path, id, base), describe(path, lid, lbase))
		}
	})
}

// BenchmarkParseLegacy is BenchmarkParse with the switch's parser.
func BenchmarkParseLegacy(b *testing.B) {
	paths := fixturePaths(b)
	lp := mustLegacy(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range paths {
			lp.parse(p)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(paths)), "ns/path")
}
