// Package discover chooses, at start-up, the node's power meters among
// those present: CPU energy (powercap RAPL, else RAPL through perf), the
// whole node (Cray pm_counters, a configured Redfish BMC, the OpenIPMI
// device, an IPMI tool, capmc when enabled, ACPI power_meter) and GPUs
// (hwmon). Open is the exporter's one entry point.
package discover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/curves"
	"github.com/wattrace/wattrace/pkg/power/hostshare"
	"github.com/wattrace/wattrace/pkg/power/ipmi"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Role is what a meter measures; a meter is opened only while one of its
// roles is still unmeasured, so each role has one source.
type Role string

// Roles.
const (
	RoleCPU      Role = "cpu"      // package, core, uncore, dram, psys
	RolePlatform Role = "platform" // the whole node
	RoleGPU      Role = "gpu"      // discrete accelerators
)

// Meter is one row of the table: a meter kind, the roles it can fill, and
// how to open it, with the settings it declares for itself (Row).
type Meter struct {
	Name  string
	Roles []Role
	// open returns the meter, nil with a reason when it is absent or not
	// configured, or an error wrapping ErrConfig when its configuration is
	// wrong (which stops start-up). A configured meter that is present but
	// fails its first reading is returned as a *power.Retrying. own is the
	// row's settings (nil for a row without any).
	open func(ctx context.Context, e *Env, own any) (power.Meter, string, error)
	// declare declares the row's settings bound to own (a fresh value when
	// own is nil) and returns it; copy returns a copy of own. Both nil for
	// a row without settings.
	declare func(s *setting.Set, own any) any
	copy    func(own any) any
}

// Plain is a row whose meter has no settings of its own.
func Plain(name string, roles []Role, open func(ctx context.Context, e *Env) (power.Meter, string, error)) Meter {
	return Meter{Name: name, Roles: roles, open: func(ctx context.Context, e *Env, _ any) (power.Meter, string, error) {
		return open(ctx, e)
	}}
}

// Row is a row whose meter has settings of its own, of type O: declare
// declares them beside the meter, bound to o (setting.Set), and open gets
// them decoded and checked. The configuration's flags, environment
// variables and YAML keys follow from the declaration.
func Row[O any](name string, roles []Role, declare func(s *setting.Set, o *O), open func(ctx context.Context, e *Env, o *O) (power.Meter, string, error)) Meter {
	own := func(v any) *O {
		if o, ok := v.(*O); ok && o != nil {
			return o
		}
		return new(O)
	}
	return Meter{Name: name, Roles: roles,
		open: func(ctx context.Context, e *Env, v any) (power.Meter, string, error) { return open(ctx, e, own(v)) },
		declare: func(s *setting.Set, v any) any {
			o := own(v)
			declare(s, o)
			return o
		},
		copy: func(v any) any {
			o := *own(v)
			return &o
		},
	}
}

// ErrConfig marks errors that stop start-up: the configuration names a
// meter that can never work as written.
var ErrConfig = errors.New("configuration")

// Meters is the table, best first: the first meter that measures a role
// owns it. Adding a meter is one row here plus its file (the opener and
// the settings it declares; capmc.go is an example).
var Meters = []Meter{
	Plain("rapl", []Role{RoleCPU}, openRAPL),
	Plain("rapl-perf", []Role{RoleCPU}, openPerfRAPL),
	Plain("pm_counters", []Role{RolePlatform, RoleGPU}, openPMCounters),
	Row("redfish", []Role{RolePlatform}, declareRedfish, openRedfish),
	Plain("ipmi", []Role{RolePlatform}, openIPMIDevice),
	Plain("ipmi-tool", []Role{RolePlatform}, openIPMITool),
	Row("capmc", []Role{RolePlatform}, declareCapmc, openCapmc),
	Plain("hwmon", []Role{RolePlatform, RoleGPU}, openHwmon),
}

// Env is what a row's Open gets: the configuration, the roles still
// unmeasured, and helpers.
type Env struct {
	Cfg  Config
	Log  *zap.Logger
	Need map[Role]bool
}

func (e *Env) opts() power.MeterOptions {
	return power.MeterOptions{Log: e.Log, MaxWatts: e.Cfg.MaxWatts}
}

// FirstReading starts reading r in the background and waits for its first
// reading; on failure the reader is stopped and the error returned.
func (e *Env) FirstReading(ctx context.Context, r power.PowerReader) (*power.Cached, error) {
	c := power.NewCachedWith(r, e.Cfg.Interval, e.Cfg.Timeout, e.opts())
	wctx, cancel := context.WithTimeout(ctx, e.Cfg.Timeout+e.Cfg.Interval)
	err := c.WaitFirst(wctx)
	cancel()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// Retry returns a meter that keeps trying open in the background; first is
// why it failed at start.
func (e *Env) Retry(name string, first error, open func(ctx context.Context) (power.Meter, error)) *power.Retrying {
	o := e.Cfg.Retry
	o.Log = e.Log
	return power.NewRetrying(name, first, open, o)
}

type note struct {
	level zapcore.Level
	line  string
}

// found is the outcome of walking the table.
type found struct {
	meters   []power.Meter
	measured bool // at least one meter gave a reading (retrying ones do not count)
	notes    []note
}

// walk opens the table's meters in order.
func walk(ctx context.Context, cfg Config, log *zap.Logger) (found, error) {
	e := &Env{Cfg: cfg, Log: log, Need: map[Role]bool{RoleCPU: true, RolePlatform: true, RoleGPU: true}}
	owner := map[Role]string{}
	var f found
	add := func(level zapcore.Level, format string, a ...any) {
		f.notes = append(f.notes, note{level, fmt.Sprintf(format, a...)})
	}
	for _, row := range Meters {
		var needed []Role
		for _, r := range row.Roles {
			if e.Need[r] {
				needed = append(needed, r)
			}
		}
		if len(needed) == 0 {
			var by []string
			for _, r := range row.Roles {
				by = append(by, fmt.Sprintf("%s by %s", r, owner[r]))
			}
			add(zapcore.InfoLevel, "%s: not used: already measured (%s)", row.Name, strings.Join(by, ", "))
			continue
		}
		m, why, err := row.open(ctx, e, cfg.rows[row.Name])
		if err != nil {
			if errors.Is(err, ErrConfig) {
				for _, x := range f.meters {
					closeMeter(x)
				}
				return found{}, err
			}
			add(zapcore.InfoLevel, "%s: %v", row.Name, err)
			continue
		}
		if m == nil {
			add(zapcore.InfoLevel, "%s: %s", row.Name, why)
			continue
		}
		f.meters = append(f.meters, m)
		fills := needed
		if rm, ok := m.(*power.Retrying); ok {
			// A configured meter holds its roles while it is retried, so
			// a lesser meter cannot take the zone it will report.
			add(zapcore.WarnLevel, "%s: configured but unusable, retried in the background: %v", row.Name, rm.LastError())
		} else {
			f.measured = true
			fills = rolesRead(ctx, m, needed)
			add(zapcore.InfoLevel, "%s: used for %s%s", row.Name, joinRoles(fills), suffix(why))
		}
		for _, r := range fills {
			e.Need[r] = false
			owner[r] = row.Name
		}
	}
	if e.Need[RolePlatform] {
		add(zapcore.InfoLevel, "platform: no whole-node meter; configure redfish or install an IPMI tool to measure the node, not just its CPUs")
	}
	return f, nil
}

func suffix(why string) string {
	if why == "" {
		return ""
	}
	return " (" + why + ")"
}

func joinRoles(rs []Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

// rolesRead are the needed roles a meter's zones actually cover.
func rolesRead(ctx context.Context, m power.Meter, needed []Role) []Role {
	samples, err := m.Read(ctx)
	if err != nil {
		return needed
	}
	have := map[Role]bool{}
	for _, s := range samples {
		switch s.Zone {
		case reading.ZonePlatform:
			have[RolePlatform] = true
		case reading.ZoneGPU:
			have[RoleGPU] = true
		default:
			have[RoleCPU] = true
		}
	}
	var out []Role
	for _, r := range needed {
		if have[r] {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return needed
	}
	return out
}

func closeMeter(m power.Meter) {
	if c, ok := m.(interface{ Close() error }); ok {
		_ = c.Close()
	}
}

// Open returns the node's meter for cfg: the drop-in replacement for the
// exporter's openMeter. power.source=rapl opens RAPL or fails;
// power.source=estimator models; auto uses the host's share when the node
// is a guest that has one mounted (hostshare), else walks the table (every discovery
// line logged, at warn for a configured meter it could not use) and
// combines what measures, falling back to the estimator, with its reason
// logged, for the CPU when nothing does. A configured meter that fails at
// start (BMC down, HTTP 500) is kept and retried in the background. An
// error means start-up must stop; it names the configuration key.
func Open(ctx context.Context, cfg Config, log *zap.Logger) (power.Meter, error) {
	if log == nil {
		log = zap.NewNop()
	}
	cfg, err := cfg.settled()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	switch cfg.Source {
	case "rapl":
		r, err := power.NewRAPLWith(cfg.SysfsRoot, power.MeterOptions{Log: log, MaxWatts: cfg.MaxWatts})
		if err != nil {
			return nil, fmt.Errorf("power.source=rapl: opening RAPL under %s: %w", cfg.SysfsRoot, err)
		}
		if _, err := r.Read(ctx); err != nil {
			return nil, fmt.Errorf("power.source=rapl: first RAPL read (energy_uj needs root or CAP_DAC_READ_SEARCH on kernels >= 5.10): %w", err)
		}
		log.Info("power source", zap.String("source", r.Name()), zap.String("method", "measured"))
		return r, nil
	case "estimator":
		return openEstimator(cfg, log, "power.source=estimator")
	}
	if m, err := openHostShare(cfg, log); m != nil || err != nil {
		return m, err
	}
	f, err := walk(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	for _, n := range f.notes {
		log.Log(n.level, "power meter discovery", zap.String("result", n.line))
	}
	if f.measured {
		m := power.Combine(f.meters...)
		log.Info("power source", zap.String("source", m.Name()), zap.String("method", "measured"))
		return m, nil
	}
	why := "no meter measures this node (see the power meter discovery lines)"
	if len(f.meters) > 0 {
		why = "no meter measures this node yet: configured meters are retried in the background"
	}
	e, err := openEstimatorZones(cfg, log, why, len(f.meters) == 0)
	if err != nil {
		for _, m := range f.meters {
			closeMeter(m)
		}
		return nil, err
	}
	if len(f.meters) == 0 {
		return e, nil
	}
	return power.Combine(append([]power.Meter{e}, f.meters...)...), nil
}

// openHostShare opens the host's share when the guest has one mounted at
// power.host-share.path: it is the node's meter, the hypervisor having
// measured what the VM drew, with the estimator standing in while the
// share is stale. nil when there is none (the table is walked).
func openHostShare(cfg Config, log *zap.Logger) (power.Meter, error) {
	opt := hostshare.Options{Dir: cfg.HostShare, Staleness: cfg.HostShareStaleness,
		MaxWatts: cfg.MaxWatts.For(reading.ZonePlatform), Log: log}
	key, where := KeyHostSharePath, cfg.HostShare
	switch {
	case cfg.HostShareVsock > 0:
		// Asked for by name: the share is the meter even while the host
		// does not answer yet (the estimator stands in until it does).
		port := uint32(cfg.HostShareVsock)
		opt.Dir, opt.Dial, opt.Where = "", vsockDialer(port, vsockTimeout), hostshare.VsockWhere(port)
		key, where = KeyHostShareVsock, opt.Where
	case cfg.HostShare == "":
		return nil, nil
	case !hostshare.Present(cfg.HostShare):
		log.Info("power meter discovery", zap.String("result", "host share: none at "+cfg.HostShare+" ("+KeyHostSharePath+")"))
		return nil, nil
	}
	host, err := hostshare.Open(opt)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", key, where, err)
	}
	est, err := openEstimator(cfg, log, "stand-in for the host share while it is stale")
	if err != nil {
		return nil, err
	}
	log.Info("power source", zap.String("source", host.Name()), zap.String("method", "measured"),
		zap.String("share", where), zap.Duration("staleness", cfg.HostShareStaleness),
		zap.String("fallback", est.Name()))
	return hostshare.NewFallback(host, est, log), nil
}

// vsockTimeout bounds one read of the share over vsock (connection and
// frame): the host answers from memory, so a read that takes longer is a
// host that is not there, and the stats loop must not wait on it.
const vsockTimeout = time.Second

// vsockDialer dials the host's vsock port (a test serves a Unix socket
// instead: a test machine's context id 2 is its own hypervisor).
var vsockDialer = hostshare.VsockDialer

func openEstimator(cfg Config, log *zap.Logger, why string) (power.Meter, error) {
	return openEstimatorZones(cfg, log, why, true)
}

// openEstimatorZones opens the estimator from what the node knows of
// itself (CPU model, sockets, threads, memory, whether it is a VM). A VM
// gets one package zone: its vCPUs at CCF's per-vCPU figures along the
// SPECpower curve's shape. Bare metal gets a package zone (TDP × Teads'
// ratio curve) and, when platform is true (no configured meter will
// report the platform), a whole-server platform zone (the SPECpower fit).
// power.estimator.{min,max}-watts-per-cpu replace the package zone's
// figures with per-CPU ones.
func openEstimatorZones(cfg Config, log *zap.Logger, why string, platform bool) (power.Meter, error) {
	node := curves.Node{Sockets: 1}
	var err error
	if node.CPU, err = power.CPUModel(cfg.ProcfsRoot); err != nil {
		log.Warn("CPU model unknown; the estimator uses its generic curves", zap.Error(err))
	}
	if node.Threads = cfg.CPUs; node.Threads <= 0 {
		node.Threads = power.CPUCount(cfg.SysfsRoot, log)
	}
	if sockets, err := power.CPUSockets(cfg.SysfsRoot); err == nil {
		ids := map[int]bool{}
		for _, p := range sockets {
			ids[p] = true
		}
		node.Sockets = min(max(len(ids), 1), node.Threads)
	} else {
		log.Warn("CPU sockets unknown; the estimator assumes 1", zap.Error(err))
	}
	if node.MemoryGiB, err = power.MemoryGiB(cfg.ProcfsRoot); err != nil {
		log.Warn("memory size unknown; the estimator assumes a typical size for the CPU count", zap.Error(err))
		node.MemoryGiB = 0
	}
	vm, vmWhy := power.Virtualized(cfg.ProcfsRoot, cfg.SysfsRoot)
	zones, err := estimatorZones(cfg, node, vm, platform)
	if err != nil {
		return nil, err
	}
	e, err := power.NewEstimator(zones...)
	if err != nil {
		return nil, fmt.Errorf("estimator: %w", err)
	}
	if vm {
		// A guest's load is its busy time over the time it had: what the
		// hypervisor stole is taken out (docs/vm.md).
		read, err := power.ProcStatSteal(cfg.ProcfsRoot)
		if err == nil {
			err = e.SetSteal(read, node.Threads, log)
		}
		if err != nil {
			log.Warn("steal time unreadable; the VM estimate counts stolen time as idle", zap.Error(err))
		}
	}
	for _, z := range zones {
		in, lo, hi := z.Curve.Info, z.Curve.Points[0], z.Curve.Points[curves.NumLevels-1]
		log.Info("power source: estimator; energy is modelled and exported with method=\"estimated\"",
			zap.String("reason", why), zap.String("zone", z.Zone), zap.String("curve", in.Kind),
			zap.Bool("vm", vm), zap.String("vm_detected_by", vmWhy),
			zap.String("cpu_model", node.CPU), zap.Int("sockets", node.Sockets), zap.Int("threads", node.Threads),
			zap.Float64("memory_gib", node.MemoryGiB), zap.String("tier", in.Tier), zap.String("arch", in.Arch),
			zap.Float64("idle_watts", lo.Watts), zap.Float64("full_load_watts", hi.Watts),
			zap.Float64("full_load_lower_watts", hi.Lower), zap.Float64("full_load_upper_watts", hi.Upper),
			zap.String("coefficients_source", in.Source), zap.Strings("fallbacks", in.Fallbacks))
	}
	return e, nil
}

// estimatorZones chooses the estimator's curves for node (see
// openEstimatorZones).
func estimatorZones(cfg Config, node curves.Node, vm, platform bool) ([]power.EstimatedZone, error) {
	model, err := curves.Default()
	if err != nil {
		return nil, fmt.Errorf("estimator: built-in curves: %w", err)
	}
	var pkg curves.Curve
	switch {
	case cfg.MinWattsPerCPU > 0 || cfg.MaxWattsPerCPU > 0:
		ref, err := model.VM(node)
		if err != nil {
			return nil, fmt.Errorf("estimator: %w", err)
		}
		// The table's per-vCPU figures, as the curve's ends, fill the one
		// not configured.
		n := float64(node.Threads)
		lo, hi := ref.Points[0].Watts/n, ref.Points[curves.NumLevels-1].Watts/n
		if cfg.MinWattsPerCPU > 0 {
			lo = cfg.MinWattsPerCPU
		}
		if cfg.MaxWattsPerCPU > 0 {
			hi = cfg.MaxWattsPerCPU
		}
		if hi < lo {
			return nil, fmt.Errorf("%w: power.estimator.max-watts-per-cpu (%g W, configured or from the CPU table) is below power.estimator.min-watts-per-cpu (%g W)", ErrConfig, hi, lo)
		}
		info := ref.Info
		info.Tier, info.Source = "configuration", "configuration (power.estimator.*-watts-per-cpu)"
		if pkg, err = model.PerVCPU(node, lo, hi, info); err != nil {
			return nil, fmt.Errorf("estimator (power.estimator.min-watts-per-cpu=%g, max-watts-per-cpu=%g): %w", lo, hi, err)
		}
	case vm:
		if pkg, err = model.VM(node); err != nil {
			return nil, fmt.Errorf("estimator: %w", err)
		}
	default:
		if pkg, err = model.Package(node); err != nil {
			return nil, fmt.Errorf("estimator: %w", err)
		}
	}
	zones := []power.EstimatedZone{{Zone: reading.ZonePackage, Curve: pkg}}
	if platform && !vm {
		server, err := model.Server(node)
		if err != nil {
			return nil, fmt.Errorf("estimator: %w", err)
		}
		zones[0].Curve = curves.CapAt(pkg, server)
		zones = append(zones, power.EstimatedZone{Zone: reading.ZonePlatform, Curve: server})
	}
	return zones, nil
}

// The rows.

func openRAPL(ctx context.Context, e *Env) (power.Meter, string, error) {
	r, err := power.NewRAPLWith(e.Cfg.SysfsRoot, e.opts())
	if err != nil {
		return nil, "", err
	}
	if _, err := r.Read(ctx); err != nil {
		return nil, "", fmt.Errorf("powercap present but unreadable: %w", err)
	}
	return r, "powercap counters", nil
}

func openPerfRAPL(ctx context.Context, e *Env) (power.Meter, string, error) {
	verdict := verdictPath(e.Cfg.VerdictDir, e.Cfg.ProcfsRoot, e.Cfg.SysfsRoot)
	if why := stalledThisBoot(verdict); why != "" {
		return nil, "", fmt.Errorf("%s (found earlier this boot, %s)", why, verdict)
	}
	p, err := power.NewPerfRAPL(e.Cfg.SysfsRoot, e.opts())
	if err != nil {
		return nil, "", err
	}
	if _, err := p.Read(ctx); err != nil {
		_ = p.Close()
		return nil, "", err
	}
	if err := mustAdvance(ctx, p, advanceWindow, 5*time.Millisecond); err != nil {
		_ = p.Close()
		if ctx.Err() == nil {
			rememberStalled(verdict, err)
		}
		return nil, "", err
	}
	return p, "power PMU opened: powercap unusable", nil
}

func openPMCounters(ctx context.Context, e *Env) (power.Meter, string, error) {
	pm, err := power.NewPMCounters(e.Cfg.SysfsRoot, e.opts())
	if err != nil {
		return nil, "", err
	}
	read := map[int]bool{}
	for i := range e.Cfg.GPUDevices {
		n := i
		if i < len(e.Cfg.GPUAccels) {
			n = e.Cfg.GPUAccels[i]
		}
		read[n] = true
	}
	first := len(e.Cfg.GPUDevices)
	if e.Cfg.GPUPending {
		// The stage will number devices it finds later from 0 on: the
		// meter's zones start after every accelerator the node has.
		first = max(first, pm.Accels())
	}
	if pm.LeaveOutAccels(read, first) == 0 {
		return nil, "its only counters are GPUs the GPU stage reads per device", nil
	}
	if _, err := pm.Read(ctx); err != nil {
		return nil, "", fmt.Errorf("present but unreadable: %w", err)
	}
	return pm, "measured energy counters; its cpu and memory counters yield to RAPL's per-socket zones when RAPL is used", nil
}

func openIPMIDevice(ctx context.Context, e *Env) (power.Meter, string, error) {
	if e.Cfg.IPMI == "off" {
		return nil, "off (power.ipmi=off)", nil
	}
	dev, path, err := e.Cfg.openIPMI(e.Cfg.IPMIDevices)
	if err != nil {
		return nil, "", err
	}
	c, err := e.FirstReading(ctx, ipmi.NewDCMIMeter(dev))
	if err == nil {
		return c, path + " (DCMI)", nil
	}
	// The device is there, so a BMC is: it may be busy or rebooting.
	return e.Retry("ipmi", fmt.Errorf("%s (DCMI): %w", path, err), func(ctx context.Context) (power.Meter, error) {
		dev, _, err := e.Cfg.openIPMI([]string{path})
		if err != nil {
			return nil, err
		}
		return e.FirstReading(ctx, ipmi.NewDCMIMeter(dev))
	}), "", nil
}

func openIPMITool(ctx context.Context, e *Env) (power.Meter, string, error) {
	if e.Cfg.IPMI == "off" {
		return nil, "off (power.ipmi=off)", nil
	}
	var tried []string
	for _, t := range ipmi.Tools {
		p, err := e.Cfg.LookPath(t.Name)
		if err != nil {
			tried = append(tried, t.Name+" not found on PATH")
			continue
		}
		tm, err := ipmi.NewToolMeter(t, p)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		c, err := e.FirstReading(ctx, tm)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: no reading: %v", p, err))
			continue
		}
		return c, p, nil
	}
	return nil, strings.Join(tried, "; "), nil
}

func openHwmon(ctx context.Context, e *Env) (power.Meter, string, error) {
	zones := power.DefaultHwmonZones()
	for chip, z := range zones {
		if (z == reading.ZonePlatform && !e.Need[RolePlatform]) || (z == reading.ZoneGPU && !e.Need[RoleGPU]) {
			delete(zones, chip)
		}
	}
	except := map[string]bool{}
	for _, d := range append(append([]string(nil), e.Cfg.GPUDevices...), e.Cfg.APUs...) {
		except[strings.ToLower(d)] = true
	}
	h, err := power.NewHwmonExcept(e.Cfg.SysfsRoot, zones, except, len(e.Cfg.GPUDevices))
	if err != nil {
		return nil, "", err
	}
	c, err := e.FirstReading(ctx, h)
	if err != nil {
		return nil, "", fmt.Errorf("no reading: %w", err)
	}
	return c, "", nil
}
