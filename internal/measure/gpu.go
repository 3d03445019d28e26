package measure

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/compose"
	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/power/discover"
	"github.com/wattrace/wattrace/pkg/reading"
)

// GPUReader reads the node's GPUs one interval at a time (internal/gpu/node):
// each device's energy since the previous call and its processes' weights.
type GPUReader interface {
	Interval(ctx context.Context, now time.Time) *reading.GPUInterval
}

var _ GPUReader = (*node.GPUs)(nil)

// gpuSlice is one device over one GPU interval: its energy, and the
// weights of the command's processes and of everyone's.
type gpuSlice struct {
	dev reading.GPUDevice
	// zone is the device's zone socket: the exporter's numbering (its
	// place among the composition's GPU devices), never its vendor's
	// index, which NVML device 0 and DRM card0 share.
	zone       int
	energyJ    float64
	dt         time.Duration
	cmdW, allW float64
}

// gpuMember says whether a PID belongs to the command: by its cgroup
// when the command has one, else by its ancestry. A GPU's samples name
// processes that may have exited by the time they are read, so what was
// learnt of a PID while it lived is kept, and the command's own PID is
// known.
func gpuMember(place *Placement, root int) func(pid int) bool {
	known := map[int]bool{root: true}
	alive := func(pid int) (in, ok bool) {
		if place != nil && place.Dir != "" {
			rel, err := ownCgroup(pid, place.Kind)
			if err != nil {
				return false, false
			}
			dir := filepath.Join(place.mount, rel)
			return dir == place.Dir || strings.HasPrefix(dir, place.Dir+"/"), true
		}
		p := pid
		for i := 0; p > 1 && i < 64; i++ {
			if p == root {
				return true, true
			}
			if p = parentOf(p); p == 0 {
				return false, false
			}
		}
		return false, true
	}
	return func(pid int) bool {
		if in, ok := known[pid]; ok {
			return in
		}
		in, ok := alive(pid)
		if ok {
			known[pid] = in
		}
		return in
	}
}

func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// gpuZone numbers a device as the composition does; without it (tests
// that build Env themselves), by its index.
func (e *Env) gpuZone(d reading.GPUDevice) int {
	if e.GPUZone != nil {
		return e.GPUZone(d)
	}
	return d.Index
}

// gpuRead takes one GPU interval and keeps, per device with a valid
// reading, its energy and whose processes weighed what. MIG boards are
// taken as a whole (their instances' weights scaled by each instance's).
func (e *Env) gpuRead(ctx context.Context, now time.Time, member func(int) bool) []gpuSlice {
	in := e.GPUs.Interval(ctx, now)
	if in == nil {
		return nil
	}
	var out []gpuSlice
	for _, d := range in.Devices {
		r := d.Reading
		if !r.OK {
			continue
		}
		s := gpuSlice{dev: r.Device, zone: e.gpuZone(r.Device), energyJ: r.EnergyJ, dt: r.Interval}
		add := func(usage map[int]float64, scale float64) {
			for pid, w := range usage {
				if !(w > 0 && w <= math.MaxFloat64) {
					continue
				}
				s.allW += w * scale
				if member(pid) {
					s.cmdW += w * scale
				}
			}
		}
		add(r.Usage, 1)
		for _, inst := range r.Instances {
			add(inst.Usage, inst.Weight)
		}
		out = append(out, s)
	}
	return out
}

func gpuKey(s gpuSlice) string { return zoneKey(reading.ZoneGPU, s.zone) }

// gpuZones splits each device's energy, interval by interval, between the
// command and the rest by their processes' GPU weights (an interval
// with no process weights stays unattributed), with the baseline's idle
// power of the device.
func (a *attribution) gpuZones(slices []gpuSlice) ([]Zone, error) {
	type key int
	const (
		command key = iota
		rest
	)
	byDev := map[string]*Zone{}
	var order []string
	var cmdW, allW = map[string]float64{}, map[string]float64{}
	for _, s := range slices {
		k := gpuKey(s)
		if err := reading.CheckGauge(s.energyJ, math.MaxFloat64); err != nil {
			return nil, fmt.Errorf("GPU %s: %w", k, err)
		}
		z := byDev[k]
		if z == nil {
			z = &Zone{Zone: reading.ZoneGPU, Socket: s.zone, Source: s.dev.Source, Method: MethodMeasured}
			byDev[k] = z
			order = append(order, k)
		}
		dyn, idle := map[key]float64{}, map[key]float64{}
		res := model.Split(model.Interval[key]{
			EnergyJ: s.energyJ, IdleJ: a.idleWatts(reading.ZoneGPU, s.zone) * s.dt.Seconds(),
			Usage: map[key]float64{command: s.cmdW, rest: s.allW - s.cmdW}, Policy: a.policy,
		}, dyn, idle)
		z.NodeJ += s.energyJ
		z.NodeIdleJ += res.IdleJ
		z.NodeDynamicJ += res.DynamicJ
		z.DynamicJ += dyn[command]
		z.IdleJ += idle[command]
		z.IdleClamped = z.IdleClamped || res.Clamped
		cmdW[k] += s.cmdW
		allW[k] += s.allW
	}
	out := make([]Zone, 0, len(order))
	for _, k := range order {
		z := byDev[k]
		z.CPUShare = share(cmdW[k], allW[k]-cmdW[k])
		out = append(out, *z)
	}
	return out, nil
}

// verdictRoot is root's verdict directory (a variable for tests).
var verdictRoot = "/run/wattrace"

// verdictDir is where a stalled power PMU is remembered for the boot
// (discover.Config.VerdictDir): a tmpfs that reboots empty, root's or
// the user's own. A verdict makes later measures skip the meter, so it
// is read only from a directory no other user can write: one that
// exists must be a directory (not a link) owned by this user and
// writable by nobody else, or it is not used, and why is returned.
func verdictDir() (dir, why string) {
	dir = verdictRoot
	if os.Geteuid() != 0 {
		d := os.Getenv("XDG_RUNTIME_DIR")
		if d == "" {
			return "", ""
		}
		dir = filepath.Join(d, "wattrace")
	}
	var st unix.Stat_t
	switch err := unix.Lstat(dir, &st); {
	case errors.Is(err, unix.ENOENT):
		return dir, "" // made by discover, ours
	case err != nil:
		return "", ""
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return "", fmt.Sprintf("not reading or writing power-meter verdicts in %s: not a directory (a link or a file)", dir)
	case int(st.Uid) != os.Geteuid():
		return "", fmt.Sprintf("not reading or writing power-meter verdicts in %s: owned by uid %d, not %d", dir, st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return "", fmt.Sprintf("not reading or writing power-meter verdicts in %s: writable by others than its owner (mode %04o)", dir, st.Mode&0o7777)
	}
	return dir, ""
}

// composeConfig is the exporter's composition (internal/compose) from
// measure's flags: the meter table with its defaults, and the GPU sources
// without allocation sources (the command's cgroup says whose work is
// whose).
func composeConfig(o *Options, verdicts string, gpus func(node.Config, *zap.Logger) (*node.GPUs, error)) compose.Config {
	return compose.Config{
		Power: discover.Config{Source: o.PowerSource, SysfsRoot: o.SysfsRoot, ProcfsRoot: o.ProcfsRoot, IPMI: o.IPMI,
			VerdictDir: verdicts},
		GPU:      node.Config{NVML: o.GPU, Sysfs: o.GPU, SysfsRoot: o.SysfsRoot, ProcfsRoot: o.ProcfsRoot},
		GPUOff:   o.GPU == "off",
		OpenGPUs: gpus,
	}
}
