// Package alloy serves the processes that opted in to profiling as
// Grafana Alloy targets, so that Alloy's pyroscope.ebpf profiles the jobs
// that asked for it and nothing else:
//
//	discovery.http "wattrace" {
//	  url = "http://localhost:9841/alloy-targets"
//	}
//	pyroscope.ebpf "jobs" {
//	  targets    = discovery.http.wattrace.targets
//	  forward_to = [pyroscope.write.default.receiver]
//	}
//
// discovery.http takes Prometheus's HTTP service discovery format: a JSON
// array of target groups, each {"targets": [...], "labels": {...}}.
// pyroscope.ebpf selects a process by the __process_pid__ label and names
// its profiles by service_name. There is one group per process, as CEEMS
// serves them, because every process has its own pid and workload labels.
package alloy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/procpid"
	"github.com/wattrace/wattrace/internal/profiling"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// Labels the handler sets itself; a Target's Labels cannot override them.
const (
	LabelPID     = "__process_pid__"
	LabelService = "service_name"
	LabelComm    = "comm"
	LabelCgroup  = "cgroup"
)

// Target is one live process that may be served.
type Target struct {
	PID  uint32
	Comm string
	// Cgroup is the process's cgroup path, as in the exporter's cgroup
	// label.
	Cgroup string
	// Service becomes service_name; Comm (then "pid-<PID>") when empty.
	Service string
	// Labels are extra labels, e.g. the workload's job_id or pod. Names
	// that are not valid Prometheus label names are dropped.
	Labels map[string]string
}

// Source lists candidate processes, typically the alive processes of the
// latest snapshot; the handler keeps those that opted in.
type Source interface {
	Targets() []Target
}

// SourceFunc adapts a function to Source.
type SourceFunc func() []Target

// Targets implements Source.
func (f SourceFunc) Targets() []Target { return f() }

// Config configures a Handler.
type Config struct {
	Source Source
	// Filter is the opt-in filter, the one the profiler uses.
	Filter *profiling.Filter
	// ProcfsRoot is the procfs mount, "/proc" when empty.
	ProcfsRoot string
	// Host is the target address of every group. Prometheus HTTP SD drops
	// a group without targets, and pyroscope.ebpf ignores the address, so
	// any non-empty value works; the host name by default, which makes the
	// targets identifiable in Alloy's UI.
	Host string
	Log  *zap.Logger
}

// Handler serves the target groups. It holds no state between requests.
type Handler struct {
	src    Source
	filter *profiling.Filter
	procfs string
	host   string
	log    *zap.Logger
}

// NewHandler checks cfg and builds the handler.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Source == nil {
		return nil, errors.New("alloy: nil target source")
	}
	if cfg.Filter == nil {
		return nil, errors.New("alloy: nil opt-in filter")
	}
	h := &Handler{src: cfg.Source, filter: cfg.Filter, procfs: cfg.ProcfsRoot, host: cfg.Host, log: cfg.Log}
	if h.procfs == "" {
		h.procfs = "/proc"
	}
	if h.host == "" {
		name, err := os.Hostname()
		if err != nil || name == "" {
			name = "localhost"
		}
		h.host = name
	}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	return h, nil
}

// Group is one target group of Prometheus HTTP service discovery.
type Group struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// Groups returns the target groups of the processes that opted in, sorted
// by pid. The environment is read on every call rather than cached: Alloy
// asks once a refresh interval (60s by default), a read costs microseconds,
// and a cache keyed by pid alone would be fooled by pid reuse.
func (h *Handler) Groups() []Group {
	groups := []Group{}
	for _, t := range h.src.Targets() {
		ok, err := h.filter.MatchPID(h.procfs, int(t.PID))
		if err != nil {
			if !procpid.Vanished(err) {
				h.log.Debug("cannot read environment", zap.Uint32("pid", t.PID), zap.Error(err))
			}
			continue
		}
		if ok {
			groups = append(groups, h.group(t))
		}
	}
	slices.SortFunc(groups, func(a, b Group) int {
		x, _ := strconv.Atoi(a.Labels[LabelPID])
		y, _ := strconv.Atoi(b.Labels[LabelPID])
		return x - y
	})
	return groups
}

func (h *Handler) group(t Target) Group {
	labels := make(map[string]string, len(t.Labels)+4)
	for k, v := range t.Labels {
		if validLabelName(k) && v != "" {
			labels[k] = valid(v)
		}
	}
	service := t.Service
	if service == "" {
		service = t.Comm
	}
	if service == "" {
		service = fmt.Sprintf("pid-%d", t.PID)
	}
	labels[LabelPID] = strconv.FormatUint(uint64(t.PID), 10)
	labels[LabelService] = valid(service)
	if t.Comm != "" {
		labels[LabelComm] = valid(t.Comm)
	}
	if t.Cgroup != "" {
		labels[LabelCgroup] = valid(t.Cgroup)
	}
	return Group{Targets: []string{h.host}, Labels: labels}
}

// ServeHTTP answers GET and HEAD with the target groups as JSON.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := json.Marshal(h.Groups())
	if err != nil {
		h.log.Error("encode alloy targets", zap.Error(err))
		http.Error(w, "encode targets: "+err.Error(), http.StatusInternalServerError)
		return
	}
	// Prometheus HTTP SD requires exactly this content type.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(append(body, '\n'))
}

// validLabelName is Prometheus's classic label name rule,
// [a-zA-Z_][a-zA-Z0-9_]*, which discovery.http enforces.
func validLabelName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// valid makes a value valid UTF-8: comm and cgroup names come from the
// kernel and may hold any bytes, and JSON would otherwise replace them
// silently anyway.
func valid(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// NewTarget builds a process's Target from its workload identity: the
// labels of every workload level it belongs to (job_id, user for a Slurm
// job; pod, namespace, container for Kubernetes; ...) with the names
// wattrace's workload series use, and a service name after the workload.
// id may be nil for a process whose cgroup was not resolved.
func NewTarget(pid uint32, comm, cgroup string, id *ident.Identity) Target {
	t := Target{PID: pid, Comm: comm, Cgroup: cgroup, Service: comm}
	if id == nil {
		return t
	}
	t.Labels = make(map[string]string)
	for _, level := range ident.Levels() {
		values, ok := id.LabelValues(level)
		if !ok {
			continue
		}
		for i, name := range ident.LabelNames(level) {
			if values[i] != "" {
				t.Labels[name] = values[i]
			}
		}
	}
	if s := ident.ServiceName(*id); s != "" {
		t.Service = s
	}
	return t
}
