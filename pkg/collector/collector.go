// Package collector exposes the stats loop's snapshots as Prometheus
// metrics. Each collector lives in its own file and reads the latest
// immutable *stats.Snapshot, so a scrape never waits on the loop and always
// sees one consistent interval.
package collector

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/snapshot"
	"github.com/wattrace/wattrace/pkg/workload"
)

const namespace = "wattrace"

// SnapshotSource hands out the latest snapshot; *stats.Loop implements it.
// Snapshot returns nil until the first interval has completed.
type SnapshotSource interface {
	Snapshot() *snapshot.Snapshot
}

// ProgramStat is the kernel's run-time statistics of one BPF program.
type ProgramStat struct {
	Name     string
	RunTime  time.Duration
	RunCount uint64
}

// ProgramStatsSource reports BPF program statistics. It is defined here
// rather than taken from pkg/bpfloader so that the collectors build and test
// without the BPF toolchain; main adapts the loader to it.
type ProgramStatsSource interface {
	ProgramStats() ([]ProgramStat, error)
}

// Collector names, used as the `collector` label of the scrape metrics.
// They match the --collector.<name> flags.
const (
	NameNode     = "node"
	NameCgroup   = "cgroup"
	NameProcess  = "process"
	NameBPFStats = "bpf-stats"
)

// Options chooses and configures the collectors.
type Options struct {
	Node    bool
	Cgroup  bool
	Process bool
	// ProcessTop limits the process collector to the N processes with the
	// most energy; 0 exports all.
	ProcessTop int
	// BPFStats enables the BPF program statistics collector; Programs must
	// then be set.
	BPFStats bool
	Programs ProgramStatsSource
	// Probes enables the kernel probes collector.
	Probes bool
	// Perf enables the opt-in perf profiling collector.
	Perf bool
	// Meters, when set, reports the health of meters read in the
	// background.
	Meters MeterStatusSource
	// Levels are the workload levels to export (container, pod, vm, job,
	// unit); none disables the workloads collector.
	Levels []workload.Kind
	// IdleAttributed is true when an idle policy other than "none" hands
	// idle energy to workloads. Only then are workload series with
	// mode="idle" exported: under "none" they would all be 0.
	IdleAttributed bool
	Log            *zap.Logger
}

// errNoSnapshot is returned by collectors before the first interval.
var errNoSnapshot = errors.New("no snapshot yet: the first accounting interval has not completed")

// subCollector is one --collector.<name>. update gets the snapshot the
// whole scrape uses (nil before the first interval).
type subCollector interface {
	describe(ch chan<- *prometheus.Desc)
	update(ch chan<- prometheus.Metric, snap *snapshot.Snapshot) error
}

type namedCollector struct {
	name string
	c    subCollector
}

// Exporter is the prometheus.Collector that main registers. It runs the
// enabled collectors and adds per-collector scrape metrics and the
// exporter's own metrics.
type Exporter struct {
	src        SnapshotSource
	collectors []namedCollector
	self       *selfCollector
	log        *zap.Logger

	scrapeSuccess  *prometheus.Desc
	scrapeDuration *prometheus.Desc
}

// New builds the exporter from the enabled collectors.
func New(src SnapshotSource, o Options) (*Exporter, error) {
	if src == nil {
		return nil, errors.New("collector: nil snapshot source")
	}
	if o.ProcessTop < 0 {
		return nil, fmt.Errorf("collector: process top %d must be >= 0", o.ProcessTop)
	}
	if o.BPFStats && o.Programs == nil {
		return nil, errors.New("collector: bpf-stats enabled without a program statistics source")
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	e := &Exporter{
		src:  src,
		self: newSelfCollector(),
		log:  log,
		scrapeSuccess: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "scrape", "collector_success"),
			"Whether a collector succeeded (1) or failed or had no data yet (0) in this scrape.",
			[]string{"collector"}, nil),
		scrapeDuration: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "scrape", "collector_duration_seconds"),
			"How long a collector took in this scrape.",
			[]string{"collector"}, nil),
	}
	// Fixed order keeps logs and scrape-metric output stable.
	if o.Node {
		e.collectors = append(e.collectors, namedCollector{NameNode, newNodeCollector()})
	}
	if o.Cgroup {
		e.collectors = append(e.collectors, namedCollector{NameCgroup, newCgroupCollector(o.IdleAttributed)})
	}
	if o.Process {
		e.collectors = append(e.collectors, namedCollector{NameProcess, newProcessCollector(o.ProcessTop, o.IdleAttributed)})
	}
	if len(o.Levels) > 0 {
		e.collectors = append(e.collectors, namedCollector{NameWorkloads, newUnitCollector(o.Levels, o.IdleAttributed)})
	}
	if o.BPFStats {
		e.collectors = append(e.collectors, namedCollector{NameBPFStats, newBPFStatsCollector(o.Programs)})
	}
	if o.Probes {
		e.collectors = append(e.collectors, namedCollector{NameProbes, newProbesCollector()})
	}
	if o.Perf {
		e.collectors = append(e.collectors, namedCollector{NamePerf, newPerfCollector()})
	}
	if o.Meters != nil {
		e.collectors = append(e.collectors, namedCollector{NameMeters, newMeterCollector(o.Meters)})
	}
	return e, nil
}

// Describe implements prometheus.Collector. Every family is described, so
// the registry checks each metric against its descriptor.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	ch <- e.scrapeSuccess
	ch <- e.scrapeDuration
	e.self.describe(ch)
	for _, c := range e.collectors {
		c.c.describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	// One snapshot for the whole scrape, so node and workload series agree.
	snap := e.src.Snapshot()
	e.self.update(ch, snap)
	for _, c := range e.collectors {
		start := time.Now()
		err := c.c.update(ch, snap)
		success := 1.0
		if err != nil {
			success = 0
			if errors.Is(err, errNoSnapshot) {
				e.log.Debug("collector has no data yet", zap.String("collector", c.name))
			} else {
				e.log.Error("collector failed", zap.String("collector", c.name), zap.Error(err))
			}
		}
		ch <- prometheus.MustNewConstMetric(e.scrapeDuration, prometheus.GaugeValue, time.Since(start).Seconds(), c.name)
		ch <- prometheus.MustNewConstMetric(e.scrapeSuccess, prometheus.GaugeValue, success, c.name)
	}
}

// metric builds a const metric. Label values come from the kernel (comm,
// cgroup paths) and may hold any bytes; they are made valid UTF-8 so one odd
// process name cannot fail the scrape, and any remaining error is reported
// through the registry instead of panicking.
func metric(desc *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	for i, l := range labels {
		labels[i] = strings.ToValidUTF8(l, "\uFFFD")
	}
	m, err := prometheus.NewConstMetric(desc, t, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}

// Label values shared by node and workload series.
const (
	methodMeasured  = "measured"
	methodEstimated = "estimated"
	modeIdle        = "idle"
	modeDynamic     = "dynamic"
	// socketNode is the socket label of node-wide zones (ZoneID.Socket -1,
	// e.g. psys or the estimator). An explicit value rather than "" because
	// PromQL treats an empty label as absent, which makes such series easy
	// to mistake for unlabelled ones.
	socketNode = "node"
)

func method(estimated bool) string {
	if estimated {
		return methodEstimated
	}
	return methodMeasured
}

// zoneLabels maps a zone name to the source and method labels of the node
// zone it belongs to. Workload energy is split from that zone, so it carries
// the same provenance.
type zoneLabels map[string][2]string

func newZoneLabels(zones []snapshot.Zone) zoneLabels {
	m := make(zoneLabels, len(zones))
	for _, z := range zones {
		if _, ok := m[z.Name]; !ok {
			m[z.Name] = [2]string{z.Source, method(z.Estimated)}
		}
	}
	return m
}

func (m zoneLabels) get(zone string) (source, meth string) {
	if l, ok := m[zone]; ok {
		return l[0], l[1]
	}
	// A workload zone without a node zone should not happen; claim nothing.
	return "unknown", methodEstimated
}
