package workload

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wattrace/wattrace/pkg/workload/ident"
	"github.com/wattrace/wattrace/pkg/workload/kube"
	"github.com/wattrace/wattrace/pkg/workload/libvirt"
)

// PodLookup answers pod metadata by pod uid without blocking;
// *kube.Client implements it.
type PodLookup interface {
	Pod(uid string) (kube.Pod, bool)
}

// Options configure a Resolver. Roots let a fixture tree, or the host's
// file systems mounted into a container, stand in for the host.
type Options struct {
	// Parser recognises the layouts; nil means the built-in ones.
	Parser *Parser
	// ProcRoot is the host's procfs (default /proc).
	ProcRoot string
	// EtcRoot holds the passwd file for uid → user names (default /etc).
	// Only with the default are uids missing from it also asked of
	// os/user, which is the exporter's own view, not a mounted host's.
	EtcRoot string
	// CgroupRoot is the mount of the key hierarchy (cgroup.Hierarchy.Mount).
	// Enrichment that needs a cgroup's processes (QEMU command lines, the
	// pod sandbox, the owner of a Slurm job on cgroup v2) is off when empty.
	CgroupRoot string
	// LibvirtDirs are searched for domain XML, status files first; nil
	// means libvirt.DefaultDirs, an empty slice none.
	LibvirtDirs []string
	// Pods gives Kubernetes names; nil leaves pods and containers with the
	// ids of their paths.
	Pods PodLookup
}

// reInstance is an OpenStack instance's domain name, for a VM whose name
// enrichment learnt.
var reInstance = regexp.MustCompile(ident.InstancePattern)

// Retry delays for identities whose enrichment is incomplete: a pod the
// kubelet does not list yet, a VM whose XML is not written yet.
const (
	minRetry = time.Second
	maxRetry = 5 * time.Minute
)

// Resolver resolves cgroup paths to identities: Parse, then names from the
// enrichment sources. Results are cached per path, so a repeated Resolve is
// a map lookup; an incomplete result is retried with exponential backoff.
// Safe for concurrent use.
type Resolver struct {
	parser     *Parser
	procRoot   string
	cgroupRoot string
	pods       PodLookup
	domains    *libvirt.Catalog
	users      *passwd
	now        func() time.Time

	mu    sync.RWMutex
	cache map[string]*entry
	epoch atomic.Uint32

	jobMu   sync.Mutex
	jobUIDs map[string]string // Slurm v2 job cgroup → owner uid
	jobIDs  map[string]string // Slurm 26.05 SLUID job cgroup → numeric job id
	// jobSLUIDs: Slurm 26.05 job_<id> cgroup (CgroupJobIdPaths=yes) →
	// the SLUID its owner's task carries, found with the owner.
	jobSLUIDs map[string]string
}

// entry is immutable once stored, except seen.
type entry struct {
	id       ident.Identity
	base     string // the workload's own cgroup, from parse
	complete bool
	retryAt  time.Time
	backoff  time.Duration
	seen     atomic.Uint32 // epoch of the latest Resolve
}

// NewResolver returns a resolver with an empty cache.
func NewResolver(o Options) *Resolver {
	p := o.Parser
	if p == nil {
		p = defaultParser
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	nss := o.EtcRoot == "" || filepath.Clean(o.EtcRoot) == "/etc"
	if o.EtcRoot == "" {
		o.EtcRoot = "/etc"
	}
	dirs := o.LibvirtDirs
	if dirs == nil {
		dirs = libvirt.DefaultDirs
	}
	r := &Resolver{
		parser:     p,
		procRoot:   o.ProcRoot,
		cgroupRoot: o.CgroupRoot,
		pods:       o.Pods,
		domains:    libvirt.NewCatalog(dirs),
		now:        time.Now,
		cache:      map[string]*entry{},
		jobUIDs:    map[string]string{},
		jobIDs:     map[string]string{},
		jobSLUIDs:  map[string]string{},
	}
	r.users = newPasswd(filepath.Join(o.EtcRoot, "passwd"), nss, func() time.Time { return r.now() })
	return r
}

// Resolve returns the identity of the cgroup at path (relative to the
// hierarchy root). It never blocks on the network; file reads happen only
// on the first call for a path and on retries of incomplete identities.
func (r *Resolver) Resolve(path string) ident.Identity {
	r.mu.RLock()
	e := r.cache[path]
	r.mu.RUnlock()
	if e != nil {
		if ep := r.epoch.Load(); e.seen.Load() != ep {
			e.seen.Store(ep)
		}
		if e.complete || r.now().Before(e.retryAt) {
			return e.id
		}
	}
	id, base := r.parser.parse(path)
	id, complete := r.enrich(id, path, base)
	n := &entry{id: id, base: base, complete: complete}
	if !complete {
		n.backoff = minRetry
		if e != nil {
			n.backoff = min(2*e.backoff, maxRetry)
		}
		n.retryAt = r.now().Add(n.backoff)
	}
	n.seen.Store(r.epoch.Load())
	r.mu.Lock()
	r.cache[path] = n
	r.mu.Unlock()
	return id
}

// Sweep drops the cached identities of paths not resolved since the
// previous Sweep and returns how many it dropped. Call it once per
// accounting interval, after resolving that interval's cgroups, so the
// cache holds what the snapshots (retained cgroups included) still name.
func (r *Resolver) Sweep() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.epoch.Load()
	n := 0
	jobs := map[string]bool{}
	for p, e := range r.cache {
		if e.seen.Load() != cur {
			delete(r.cache, p)
			n++
		} else if e.id.Kind == ident.KindJob || e.id.Kind == ident.KindPBSJob {
			jobs[e.base] = true
		}
	}
	r.epoch.Add(1)
	// Keep a job's owner while any of its cgroups is cached, so a step
	// that starts after the job's tasks have exited gets the same labels.
	r.jobMu.Lock()
	for b := range r.jobUIDs {
		if !jobs[b] {
			delete(r.jobUIDs, b)
		}
	}
	for b := range r.jobIDs {
		if !jobs[b] {
			delete(r.jobIDs, b)
		}
	}
	for b := range r.jobSLUIDs {
		if !jobs[b] {
			delete(r.jobSLUIDs, b)
		}
	}
	r.jobMu.Unlock()
	return n
}

// LibvirtErr reports libvirt XML files that could not be read or parsed.
func (r *Resolver) LibvirtErr() error { return r.domains.Err() }

// enrich adds what the sources know to a parsed identity and reports
// whether every source that applies answered.
func (r *Resolver) enrich(id ident.Identity, cgPath, base string) (ident.Identity, bool) {
	complete := true
	if id.Kind == ident.KindJob && id.JobID == "" && id.SLUID != "" {
		// Until the numeric id is known the job is exported under its
		// SLUID (job_id empty), never folded into the node.
		if jid, ok := r.jobID(id.SLUID, base); ok {
			id.JobID, id.ID = jid, jid
		} else {
			complete = false
		}
	}
	if id.Kind == ident.KindJob && id.UID == "" {
		if uid, ok := r.jobUID(id, cgPath, base); ok {
			id.UID = uid
			if id.SLUID == "" {
				id.SLUID = r.jobSLUID(base)
			}
		} else {
			complete = false
		}
	}
	if id.Kind == ident.KindPBSJob && id.UID == "" {
		if uid, ok := r.pbsUID(base); ok {
			id.UID = uid
		} else {
			complete = false
		}
	}
	if id.UID != "" {
		if name, ok := r.users.lookup(id.UID); ok {
			id.User = name
		} else {
			complete = false
		}
	}
	if id.PodUID != "" && r.pods != nil && !r.enrichPod(&id, cgPath) {
		complete = false
	}
	if id.Kind == ident.KindVM && !r.enrichVM(&id, cgPath, base) {
		complete = false
	}
	return id, complete
}

func (r *Resolver) enrichPod(id *ident.Identity, cgPath string) bool {
	pod, ok := r.pods.Pod(id.PodUID)
	if !ok {
		return false
	}
	id.Pod, id.Namespace = pod.Name, pod.Namespace
	if pod.QoS != "" {
		id.QoS = pod.QoS
	}
	switch id.Kind {
	case ident.KindPod:
		id.Name = pod.Name
	case ident.KindContainer:
		if c, ok := pod.Containers[id.ID]; ok {
			id.Container, id.Name = c.Name, c.Name
			if id.Manager == ident.ManagerKubernetes && c.Runtime != "" {
				id.Manager = c.Runtime
			}
			return true
		}
		// The kubelet does not report the sandbox's id; its process is
		// the pause binary.
		if r.isSandbox(cgPath) {
			id.Container, id.Name = ident.SandboxContainer, ident.SandboxContainer
			return true
		}
		return false
	}
	return true
}

func (r *Resolver) isSandbox(cgPath string) bool {
	for _, pid := range r.pids(cgPath) {
		comm, err := r.procFile(pid, "comm")
		if err == nil && strings.TrimSpace(string(comm)) == "pause" {
			return true
		}
	}
	return false
}

// enrichVM finds the domain in libvirt's XML, else in the QEMU command line
// of a process in the VM's cgroups.
func (r *Resolver) enrichVM(id *ident.Identity, cgPath, base string) bool {
	domID := libvirt.ParseID(id.DomainID)
	d, ok := r.domains.Find(domID, id.VMName)
	if !ok {
		d, ok = r.vmFromCmdline(domID, id.VMName, cgPath, base)
	}
	if !ok {
		return false
	}
	id.VMName, id.VMUUID, id.Name = d.Name, d.UUID, d.DisplayName
	id.VMVCPUs, id.VMMemoryKiB = d.VCPUs, d.MemoryKiB
	if id.Name == "" {
		id.Name = d.Name
	}
	if d.UUID != "" {
		id.ID = d.UUID
	} else {
		id.ID = d.Name
	}
	id.Instance = ""
	if reInstance.MatchString(d.Name) {
		id.Instance = d.Name
	}
	return d.UUID != ""
}

func (r *Resolver) vmFromCmdline(domID int, pathName, cgPath, base string) (libvirt.Domain, bool) {
	for _, dir := range []string{cgPath, base, path.Join(base, "libvirt", "emulator"), path.Join(base, "emulator")} {
		for _, pid := range r.pids(dir) {
			cmd, err := r.procFile(pid, "cmdline")
			if err != nil {
				continue
			}
			name, uuid := libvirt.ParseCmdline(cmd)
			if name == "" {
				continue
			}
			// The process must be this VM's: its name yields the path's.
			if domID > 0 && libvirt.MachineName(domID, name, false) != libvirt.MachineName(domID, pathName, false) {
				continue
			}
			if domID == 0 && name != pathName {
				continue
			}
			return libvirt.Domain{Name: name, UUID: strings.ToLower(uuid), ID: domID}, true
		}
	}
	return libvirt.Domain{}, false
}

// jobUID finds the owner of a Slurm job whose path has no uid_<n> (cgroup
// v2) from the processes of its task cgroups, and remembers it per job so
// every cgroup of the job gets the same labels. The slurmstepd cgroup runs
// as root and is not asked.
func (r *Resolver) jobUID(id ident.Identity, cgPath, base string) (string, bool) {
	r.jobMu.Lock()
	uid, ok := r.jobUIDs[base]
	r.jobMu.Unlock()
	if ok {
		return uid, true
	}
	if r.cgroupRoot == "" {
		return "", false
	}
	var candidates []string
	if id.Task != "" {
		candidates = append(candidates, cgPath)
	}
	steps, _ := os.ReadDir(filepath.Join(r.cgroupRoot, base))
	for _, s := range steps {
		if !s.IsDir() || !strings.HasPrefix(s.Name(), "step_") {
			continue
		}
		for _, under := range []string{path.Join(base, s.Name(), "user"), path.Join(base, s.Name())} {
			tasks, _ := os.ReadDir(filepath.Join(r.cgroupRoot, under))
			for _, t := range tasks {
				if t.IsDir() && strings.HasPrefix(t.Name(), "task_") {
					candidates = append(candidates, path.Join(under, t.Name()))
				}
			}
		}
	}
	for _, c := range candidates {
		for _, pid := range r.pids(c) {
			if uid, ok := r.procUID(pid); ok {
				sluid := r.taskSLUID(pid, id.JobID)
				r.jobMu.Lock()
				r.jobUIDs[base] = uid
				r.jobSLUIDs[base] = sluid
				r.jobMu.Unlock()
				return uid, true
			}
		}
	}
	return "", false
}
