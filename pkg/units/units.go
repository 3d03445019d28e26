// Package units holds the vocabulary of the units store: what a unit (a
// Slurm or PBS job, pod, VM, container or systemd unit) is, the figures it used,
// the filters and usage queries the API asks, and the Reader interface the
// API server reads through. It has no dependencies beyond the standard
// library, so the store (internal/units/store), the updater (internal/units/updater)
// and the API can all build on it without importing each other.
//
// Units are discovered from the exporters' workload series in the TSDB;
// their figures are the increase of the exporters' counters over the
// unit's lifetime, summed over the nodes it ran on (see internal/units/updater).
package units

import (
	"context"
	"errors"
	"regexp"
	"time"
)

// Kind is what sort of workload a unit is; the values are the exporter's
// workload levels (the <level> of wattrace_<level>_* families).
type Kind string

// The kinds of unit, one per workload level of the exporter.
const (
	KindJob         Kind = "job"       // a Slurm job
	KindPod         Kind = "pod"       // a Kubernetes pod
	KindVM          Kind = "vm"        // a libvirt/QEMU virtual machine
	KindContainer   Kind = "container" // a docker/containerd/CRI-O/podman container
	KindSystemdUnit Kind = "unit"      // a systemd service or scope
	KindPBSJob      Kind = "pbs_job"   // a PBS Professional or OpenPBS job
)

// Kinds returns every kind, in a fixed order.
func Kinds() []Kind {
	return []Kind{KindJob, KindPod, KindVM, KindContainer, KindSystemdUnit, KindPBSJob}
}

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool {
	for _, v := range Kinds() {
		if k == v {
			return true
		}
	}
	return false
}

// Status says whether a unit's figures can still change.
type Status string

const (
	// StatusRunning: the unit's series are still being scraped; its
	// figures grow each update cycle.
	StatusRunning Status = "running"
	// StatusPending: the unit has ended (or its series were not seen in
	// the latest cycle) but its figures are not known to be complete yet,
	// for instance because the TSDB was unreachable. Never zero-filled:
	// the figures hold what was counted so far and complete later.
	StatusPending Status = "pending"
	// StatusFinal: the unit's series have stopped and every sample the
	// exporters kept for it has been counted; the figures will not change.
	StatusFinal Status = "final"
)

// Key identifies a unit: IDs are unique within a cluster and kind. In a
// lookup (Reader.Unit, Reader.Owned) an empty Cluster or Kind matches any.
type Key struct {
	Cluster string `json:"cluster"`
	Kind    Kind   `json:"kind"`
	ID      string `json:"id"`
}

// Allocation is what the manager granted the unit (zero when unknown, as
// for units that no manager connector describes).
type Allocation struct {
	CPUs        int   `json:"cpus,omitempty"`
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	GPUs        int   `json:"gpus,omitempty"`
}

// ZoneEnergy is the energy of one zone (package, dram, psys, platform,
// gpu, …, as the exporter's zone label) measured or estimated (method),
// summed over modes (idle and dynamic), sources and nodes.
type ZoneEnergy struct {
	Zone   string  `json:"zone"`
	Method string  `json:"method"`
	Joules float64 `json:"joules"`
}

// KWh is the energy in kilowatt-hours.
func (z ZoneEnergy) KWh() float64 { return z.Joules / 3.6e6 }

// Emission is the CO2e of one zone's energy priced by one provider's
// carbon intensity (docs/emissions.md), summed over modes and nodes.
type Emission struct {
	Zone     string  `json:"zone"`
	Provider string  `json:"provider"`
	Grams    float64 `json:"grams"`
}

// Figures are what a unit used, or the sum of many units' use. Zones
// overlap (psys contains package, package contains core): use Joules and
// Grams for a total that counts each joule once.
type Figures struct {
	Energy    []ZoneEnergy `json:"energy,omitempty"`
	Emissions []Emission   `json:"emissions,omitempty"`
	// CPUSeconds is the CPU time of the unit's tasks (exited ones included).
	CPUSeconds float64 `json:"cpu_seconds"`
	// GPUSeconds is GPU allocation time: allocated GPUs × wall time.
	GPUSeconds float64 `json:"gpu_seconds,omitempty"`
	// GPUIdleSeconds is the time the unit held GPUs none of its processes
	// used, summed over the GPUs (wattrace_gpu_allocation_idle_seconds_total;
	// docs/gpu.md, "GPUs held but idle"): at most GPUSeconds.
	GPUIdleSeconds float64 `json:"gpu_idle_seconds,omitempty"`
	// IO and network bytes where the exporters export them
	// (wattrace_<level>_io_bytes_total, _network_payload_bytes_total).
	IOReadBytes      float64 `json:"io_read_bytes,omitempty"`
	IOWriteBytes     float64 `json:"io_write_bytes,omitempty"`
	NetSentBytes     float64 `json:"net_sent_bytes,omitempty"`
	NetReceivedBytes float64 `json:"net_received_bytes,omitempty"`
}

// TotalZones are the zones whose sum counts each joule once: the
// platform-wide zone where one exists, else package and dram; plus gpu,
// which no CPU zone contains. core and uncore lie inside package.
func TotalZones(zones []string) []string {
	has := map[string]bool{}
	for _, z := range zones {
		has[z] = true
	}
	var out []string
	switch {
	case has["platform"]:
		out = append(out, "platform")
	case has["psys"]:
		out = append(out, "psys")
	default:
		for _, z := range []string{"package", "dram"} {
			if has[z] {
				out = append(out, z)
			}
		}
	}
	if has["gpu"] {
		out = append(out, "gpu")
	}
	return out
}

func (f Figures) totalZones() map[string]bool {
	zones := make([]string, 0, len(f.Energy))
	for _, e := range f.Energy {
		zones = append(zones, e.Zone)
	}
	set := map[string]bool{}
	for _, z := range TotalZones(zones) {
		set[z] = true
	}
	return set
}

// Joules is the unit's total energy over TotalZones, measured and
// estimated together.
func (f Figures) Joules() float64 {
	zones := f.totalZones()
	var sum float64
	for _, e := range f.Energy {
		if zones[e.Zone] {
			sum += e.Joules
		}
	}
	return sum
}

// GPUJoules is the energy of zone gpu.
func (f Figures) GPUJoules() float64 {
	var sum float64
	for _, e := range f.Energy {
		if e.Zone == "gpu" {
			sum += e.Joules
		}
	}
	return sum
}

// Grams is the CO2e over TotalZones priced by provider ("" = the first
// provider in the figures, so a single-provider site needs no name).
func (f Figures) Grams(provider string) float64 {
	if provider == "" && len(f.Emissions) > 0 {
		provider = f.Emissions[0].Provider
	}
	zones := f.totalZones()
	var sum float64
	for _, e := range f.Emissions {
		if e.Provider == provider && zones[e.Zone] {
			sum += e.Grams
		}
	}
	return sum
}

// Unit is one workload as the store knows it: what the manager says about
// it (when a connector such as Slurm's describes it) and the figures
// counted from the TSDB. Times are UTC; a zero time is unknown (End is
// zero while the unit runs).
type Unit struct {
	Cluster   string   `json:"cluster"`
	Kind      Kind     `json:"kind"`
	ID        string   `json:"id"`
	Name      string   `json:"name,omitempty"`
	User      string   `json:"user,omitempty"`
	Group     string   `json:"group,omitempty"`
	Project   string   `json:"project,omitempty"` // Slurm account, Kubernetes namespace
	Partition string   `json:"partition,omitempty"`
	Nodes     []string `json:"nodes,omitempty"`
	// State is the manager's state (COMPLETED, CANCELLED, FAILED,
	// RUNNING, …) when a connector knows it, else RUNNING or ENDED as
	// the TSDB shows it.
	State      string     `json:"state,omitempty"`
	Submit     time.Time  `json:"submit,omitzero"`
	Start      time.Time  `json:"start,omitzero"`
	End        time.Time  `json:"end,omitzero"`
	Allocation Allocation `json:"allocation"`
	// ExitCode is the manager's exit code (128+signal when killed by a
	// signal); nil when unknown.
	ExitCode *int    `json:"exit_code,omitempty"`
	Figures  Figures `json:"figures"`
	// Status says whether Figures can still change.
	Status Status `json:"status"`
	// Updated is when the store last changed the unit.
	Updated time.Time `json:"updated,omitzero"`
	// SLUID is a Slurm job's lexicographically-sortable unique id (Slurm
	// 26.05 and later), as sacct and slurmrestd report it. A connector
	// sets it; the store keeps it as an alias of the job, so that series
	// naming the job by it only (the exporter's sluid label where the
	// job's cgroup is named by it) count into this unit. Not part of the
	// API's answer.
	SLUID string `json:"-"`
}

// reSLUID is a SLUID as Slurm prints it (print_sluid, src/common/sluid.c):
// "s" and 13 digits of Crockford's base32, the first at most F (the top 4
// of 64 bits).
var reSLUID = regexp.MustCompile(`^s[0-9A-F][0-9A-HJKMNP-TV-Z]{12}$`)

// ValidSLUID reports whether s is a SLUID in Slurm's printed form.
func ValidSLUID(s string) bool { return reSLUID.MatchString(s) }

// Key returns the unit's key.
func (u Unit) Key() Key { return Key{Cluster: u.Cluster, Kind: u.Kind, ID: u.ID} }

// WallSeconds is End (or now, while running) minus Start; 0 if Start is
// unknown.
func (u Unit) WallSeconds(now time.Time) float64 {
	if u.Start.IsZero() {
		return 0
	}
	end := u.End
	if end.IsZero() {
		end = now
	}
	if end.Before(u.Start) {
		return 0
	}
	return end.Sub(u.Start).Seconds()
}

// Fields are the names Filter.Fields may hold: Unit's JSON names.
var Fields = []string{
	"cluster", "kind", "id", "name", "user", "group", "project", "partition",
	"nodes", "state", "submit", "start", "end", "allocation", "exit_code",
	"figures", "status", "updated",
}

// ValidField reports whether name is one of Fields.
func ValidField(name string) bool {
	for _, f := range Fields {
		if f == name {
			return true
		}
	}
	return false
}

// Filter selects units. Empty slices and zero values select everything;
// several values in one slice are alternatives (OR), different fields
// combine with AND.
type Filter struct {
	Users    []string
	Projects []string
	Clusters []string
	Kinds    []Kind
	IDs      []string
	// From and To select the units that ran at some time in [From, To):
	// started before To and not ended before From (running units have not
	// ended). Zero means unbounded.
	From, To time.Time
	// Running, when set, keeps only units that are (true) or are not
	// (false) still running.
	Running *bool
	// Fields, when set, are the Unit fields (Fields names) the caller
	// wants; the store may return more. The API trims its answer to them.
	Fields []string
	// Limit caps the units returned (0: the store's default, DefaultLimit);
	// Offset skips that many first. Units come newest start first.
	Limit, Offset int
}

// DefaultLimit is the number of units a Filter without Limit returns.
const DefaultLimit = 1000

// MaxLimit is the most units one call returns.
const MaxLimit = 100000

// Validate reports a filter the store would refuse, wrapped in ErrInvalid.
func (f Filter) Validate() error {
	if !f.From.IsZero() && !f.To.IsZero() && f.To.Before(f.From) {
		return invalid("time range ends before it starts")
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return invalid("limit must be between 0 and 100000")
	}
	if f.Offset < 0 {
		return invalid("offset must not be negative")
	}
	for _, k := range f.Kinds {
		if !k.Valid() {
			return invalid("unknown kind " + string(k))
		}
	}
	for _, name := range f.Fields {
		if !ValidField(name) {
			return invalid("unknown field " + name)
		}
	}
	return nil
}

// Period is the length of the buckets a usage query sums into.
type Period string

const (
	PeriodTotal Period = ""      // one bucket: the whole range
	PeriodDay   Period = "day"   // UTC days
	PeriodMonth Period = "month" // UTC calendar months
)

// GroupBy is a dimension usage is summed by.
type GroupBy string

const (
	ByUser    GroupBy = "user"
	ByProject GroupBy = "project"
	ByCluster GroupBy = "cluster"
	ByKind    GroupBy = "kind"
)

// UsageQuery asks for usage summed over units. A unit counts, with its
// whole figures (so usage and the unit list agree), at the time it
// started; the query sums the units that started in [From, To) exactly,
// not the whole UTC days the range touches, and a day or month bucket
// reports the part of it the range covers (its From and To clipped to the
// query's).
type UsageQuery struct {
	Users    []string
	Projects []string
	Clusters []string
	Kinds    []Kind
	// Within, when not empty, keeps only these (cluster, project) pairs.
	// A project is a name on one cluster: the same name on another
	// cluster (another site's account, a namespace of another
	// Kubernetes cluster) is another project, with other members, so a
	// non-admin's project usage is narrowed to the pairs they are in.
	Within []ClusterProject
	// From and To bound the units' starts: [From, To). Both are
	// required.
	From, To time.Time
	// By lists the dimensions kept apart (empty: one total per period).
	By     []GroupBy
	Period Period
}

// ClusterProject names one project: a project name on one cluster.
type ClusterProject struct {
	Cluster, Project string
}

// Validate reports a query the store would refuse, wrapped in ErrInvalid.
func (q UsageQuery) Validate() error {
	if q.From.IsZero() || q.To.IsZero() {
		return invalid("usage needs a time range")
	}
	if q.To.Before(q.From) {
		return invalid("time range ends before it starts")
	}
	switch q.Period {
	case PeriodTotal, PeriodDay, PeriodMonth:
	default:
		return invalid("unknown period " + string(q.Period))
	}
	for _, b := range q.By {
		switch b {
		case ByUser, ByProject, ByCluster, ByKind:
		default:
			return invalid("unknown group " + string(b))
		}
	}
	for _, k := range q.Kinds {
		if !k.Valid() {
			return invalid("unknown kind " + string(k))
		}
	}
	return nil
}

// Averages are per-unit ratios averaged over units weighted by their CPU
// time (a unit that used more CPU weighs more), as CEEMS reports them:
// Σ cpu_u·x_u / Σ cpu_u, with x_u the unit's ratio over its wall time so
// far.
type Averages struct {
	// PowerWatts: the unit's power (Figures.Joules per second of wall time).
	PowerWatts float64 `json:"power_watts"`
	// CPUs: busy CPUs (CPU seconds per second of wall time).
	CPUs float64 `json:"cpus"`
	// CPUEfficiency: busy CPUs over allocated CPUs (0..1), for units
	// whose allocation is known.
	CPUEfficiency float64 `json:"cpu_efficiency"`
}

// Usage is one bucket of a usage query: the units of one period and one
// combination of the By dimensions (dimensions not grouped by are empty).
type Usage struct {
	Cluster string    `json:"cluster,omitempty"`
	Kind    Kind      `json:"kind,omitempty"`
	User    string    `json:"user,omitempty"`
	Project string    `json:"project,omitempty"`
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	// Units is how many units started in the bucket.
	Units       int64    `json:"units"`
	WallSeconds float64  `json:"wall_seconds"`
	Figures     Figures  `json:"figures"`
	Averages    Averages `json:"averages"`
}

// Project is a project (Slurm account, namespace) and the users seen in it.
type Project struct {
	Cluster string   `json:"cluster"`
	Name    string   `json:"name"`
	Users   []string `json:"users"`
}

// User is a user and the projects they were seen in.
type User struct {
	Cluster  string   `json:"cluster"`
	Name     string   `json:"name"`
	Projects []string `json:"projects"`
}

// Membership narrows Projects and Users: empty fields match all.
type Membership struct {
	Clusters []string
	Users    []string
	Projects []string
}

// Reader is what the API server needs of the store. Every method is safe
// for concurrent use; errors wrap ErrInvalid (a bad filter: answer 400) or
// ErrNotFound where stated.
type Reader interface {
	// Units returns the units the filter selects, newest start first.
	Units(ctx context.Context, f Filter) ([]Unit, error)
	// Unit returns one unit; ErrNotFound if none matches, ErrAmbiguous
	// if an empty Cluster or Kind leaves more than one.
	Unit(ctx context.Context, k Key) (Unit, error)
	// Usage sums units per period and By dimensions.
	Usage(ctx context.Context, q UsageQuery) ([]Usage, error)
	// Projects lists projects with their users.
	Projects(ctx context.Context, m Membership) ([]Project, error)
	// Users lists users with their projects.
	Users(ctx context.Context, m Membership) ([]User, error)
	// Owned reports whether user owns every one of the units (for
	// /units/verify); a unit the store does not know is not owned.
	Owned(ctx context.Context, user string, keys []Key) (bool, error)
	// Ping checks that the store answers (for /health).
	Ping(ctx context.Context) error
}

// Errors the Reader wraps.
var (
	ErrInvalid   = errors.New("invalid query")
	ErrNotFound  = errors.New("unit not found")
	ErrAmbiguous = errors.New("more than one unit matches")
)

type invalidError string

func (e invalidError) Error() string { return "invalid query: " + string(e) }
func (e invalidError) Unwrap() error { return ErrInvalid }

func invalid(msg string) error { return invalidError(msg) }
