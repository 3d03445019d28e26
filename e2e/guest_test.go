//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/wattrace/wattrace/pkg/power/hostshare"
)

const (
	guestVM   = "wattrace-e2e-guest" // libvirt.sh's GUEST_VM
	guestUUID = "5e1f0a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
	// guestStaleness is the guest's power.host-share.staleness: longer
	// than a host exporter restart takes here (BPF load included), so the
	// restart is not an outage.
	guestStaleness = 25 * time.Second
)

// guestDomain is what a guest's libvirt domain holds beyond what every
// guest's does: its memory, and how it reaches its share.
type guestDomain struct {
	memMiB int
	// share is the host's directory for the guest, over virtio-9p
	// read-only (mount tag wattrace, as docs/vm.md gives it); "" for
	// none.
	share string
	// vsockBackend is the socket of a vhost-user vsock backend; "" for
	// none. libvirt 9.0 (Debian 12) has no vhost-user vsock of its own
	// (its <vsock> is the kernel's vhost-vsock, which this machine
	// lacks), so QEMU's vhost-user-vsock-pci device comes in on its
	// command line, as the user network does, and the guest's memory is
	// a shared memfd (the backend reads the rings and buffers in it).
	vsockBackend string
}

// guestDomainXML is the libvirt domain of the guest: Debian's kernel, the
// initramfs guest.sh built in work, d's memory and share, the serial
// console in a file, and QEMU's user network forwarding 127.0.0.1:port
// to the guest's exporter.
func guestDomainXML(work string, port int, d guestDomain) string {
	var memory, share, vsock string
	if d.share != "" {
		share = fmt.Sprintf(`
    <filesystem type='mount' accessmode='mapped'>
      <source dir='%s'/>
      <target dir='wattrace'/>
      <readonly/>
    </filesystem>`, d.share)
	}
	if d.vsockBackend != "" {
		memory = `
  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>`
		vsock = fmt.Sprintf(`
    <qemu:arg value='-chardev'/>
    <qemu:arg value='socket,id=wtvsock,path=%s'/>
    <qemu:arg value='-device'/>
    <qemu:arg value='vhost-user-vsock-pci,chardev=wtvsock,bus=pci.0,addr=0x11'/>`, d.vsockBackend)
	}
	return fmt.Sprintf(`<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>%s</name>
  <uuid>%s</uuid>
  <memory unit='MiB'>%d</memory>%s
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>%s/vmlinuz</kernel>
    <initrd>%s/initrd.gz</initrd>
    <cmdline>console=ttyS0 quiet panic=-1</cmdline>
  </os>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>%s
    <serial type='file'><source path='%s/console.log'/><target port='0'/></serial>
    <memballoon model='none'/>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-netdev'/>
    <qemu:arg value='user,id=wtnet,hostfwd=tcp:127.0.0.1:%d-:9841'/>
    <qemu:arg value='-device'/>
    <qemu:arg value='virtio-net-pci,netdev=wtnet,bus=pci.0,addr=0x10'/>%s
  </qemu:commandline>
</domain>
`, guestVM, guestUUID, d.memMiB, memory, work, work, share, work, port, vsock)
}

// guestBed is the libvirt bed with one real Linux guest (guestVM)
// reading its host's share (over virtio-9p or vsock), and the host's
// side of it: what the tests of the guest share.
type guestBed struct {
	work       string // the test's directory; the guest's files in work/guest
	shareRoot  string // the host exporter's guests.share.path
	share      string // the guest's directory in it, mounted in the guest
	port       int    // 127.0.0.1:port reaches the guest's exporter
	hostSource string // the source the guest names the host by
	// over says how the guest reads its share, for messages ("" for
	// virtio-9p).
	over string
	// torndown are run after the domain's teardown, in order.
	torndown []func()
	// stuck adds to the message of a guest that serves no measured
	// energy (a vsock backend's counts); nil for nothing.
	stuck func() string
}

// newGuestBed takes the bed's lock, registers its teardown and starts
// libvirt's daemons; the shares are under the test's directory.
func newGuestBed(t *testing.T) *guestBed {
	t.Helper()
	requireRoot(t)
	libvirtLock(t)
	work := t.TempDir()
	return startGuestBed(t, work, filepath.Join(work, "guests"))
}

// startGuestBed makes the guest's share directory under shareRoot,
// registers the bed's teardown (the domains, then b.torndown) and starts
// libvirt's daemons. The caller holds the bed's lock.
func startGuestBed(t *testing.T, work, shareRoot string) *guestBed {
	t.Helper()
	hostName, _ := os.Hostname()
	b := &guestBed{work: work, shareRoot: shareRoot, port: freePort(t), hostSource: "host:" + hostName}
	b.share = filepath.Join(b.shareRoot, "uuid-"+strings.ToLower(guestUUID))
	if err := os.MkdirAll(b.share, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			tailFile(t, filepath.Join(work, "guest", "console.log"), 40)
		}
		if _, err := script(t, 3*time.Minute, "libvirt.sh", "teardown"); err != nil {
			t.Errorf("libvirt.sh teardown: %v", err)
		}
		if left, _ := filepath.Glob("/sys/fs/cgroup/*/machine/qemu-*-" + guestVM + ".libvirt-qemu"); len(left) > 0 {
			t.Errorf("VM cgroups left after teardown: %v", left)
		}
		for _, f := range b.torndown {
			f()
		}
	})
	if _, err := script(t, 15*time.Minute, "libvirt.sh", "daemons"); err != nil {
		t.Fatalf("libvirt.sh daemons: %v", err)
	}
	return b
}

// boot builds the guest (guest.sh: the exporter run with guestArgs),
// defines its domain with memMiB of memory and the share over virtio-9p,
// and starts it.
func (b *guestBed) boot(t *testing.T, memMiB int, guestArgs ...string) {
	t.Helper()
	b.bootDomain(t, guestDomain{memMiB: memMiB, share: b.share}, guestArgs...)
}

// bootDomain builds the guest (guest.sh: the exporter run with
// guestArgs), defines its domain d and starts it.
func (b *guestBed) bootDomain(t *testing.T, d guestDomain, guestArgs ...string) {
	t.Helper()
	dir := filepath.Join(b.work, "guest")
	if _, err := script(t, 10*time.Minute, "guest.sh", append([]string{"build", dir, exporterBinary(t)}, guestArgs...)...); err != nil {
		t.Fatalf("guest.sh build: %v", err)
	}
	xml := filepath.Join(dir, guestVM+".xml")
	if err := os.WriteFile(xml, []byte(guestDomainXML(dir, b.port, d)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"LIBVIRT_DEFAULT_URI=qemu:///system"}
	for _, args := range [][]string{{"define", xml}, {"start", guestVM}} {
		if _, err := run(time.Minute, env, "virsh", args...); err != nil {
			t.Fatal(err)
		}
	}
}

// hostArgs are the host exporter's arguments: BPF accounting keyed by
// cgroup2, the RAPL fixture under sysfs, idle shared (so the VM's figure
// holds its part), the shares written every second; then extra.
func (b *guestBed) hostArgs(sysfs string, extra ...string) []string {
	return append([]string{"--accounting.mode=bpf", "--cgroup.hierarchy=v2", "--path.sysfs=" + sysfs, "--power.source=rapl",
		"--power.idle-policy=even", "--guests.share.path=" + b.shareRoot, "--guests.share.interval=1s"}, extra...)
}

// watch is a guestWatch of the guest's exporter.
func (b *guestBed) watch(t *testing.T) *guestWatch {
	return &guestWatch{t: t, e: &exporter{url: fmt.Sprintf("http://127.0.0.1:%d", b.port)}, max: map[string]float64{}}
}

// waitMeasured waits (3 min at most: the guest boots under TCG) until the
// guest serves node energy measured by its host (read over virtio-9p or
// vsock), and returns that scrape.
func (b *guestBed) waitMeasured(t *testing.T, g *guestWatch) families {
	t.Helper()
	var fams families
	var err error
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		if fams, err = g.scrape(); err == nil {
			ms := match(fams, "wattrace_node_energy_joules_total", labelsEq(map[string]string{"source": b.hostSource, "method": "measured"}))
			if len(ms) > 0 && nodeJ(fams) > 0 {
				return fams
			}
		}
		if time.Now().After(deadline) {
			if fams != nil {
				dump(t, fams, nil, "wattrace_node_energy_joules_total", "wattrace_source_up", "wattrace_source_reads_total",
					"wattrace_source_read_errors_total", "wattrace_source_rejected_readings_total", "wattrace_stats_intervals_total")
			}
			if m, err := os.ReadFile(filepath.Join(b.share, hostshare.MetaFile)); err == nil {
				t.Logf("share meta: %s", m)
			}
			more := ""
			if b.stuck != nil {
				more = "; " + b.stuck()
			}
			t.Fatalf("the guest served no measured node energy from %s%s within 3 min (last error %v%s)", b.hostSource, b.over, err, more)
		}
	}
}

// guestWatch scrapes the guest and remembers every node energy series'
// highest value, and each zone's sum over its series: any decrease is a
// failure.
type guestWatch struct {
	t     *testing.T
	e     *exporter
	max   map[string]float64
	zones map[string]float64
	drops []string
}

func seriesKey(m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(ls)
	return strings.Join(ls, ",")
}

// scrape returns the guest's families, checking that no node energy
// series and no zone's sum over its series went down since the last
// scrape. A zone whose series are not exported (ended while the estimator
// stands in) is not compared until they are back.
func (g *guestWatch) scrape() (families, error) {
	fams, err := g.e.scrape()
	if err != nil {
		return nil, err
	}
	if g.zones == nil {
		g.zones = map[string]float64{}
	}
	sums := map[string]float64{}
	for _, m := range fams["wattrace_node_energy_joules_total"].GetMetric() {
		k, v := seriesKey(m), value(m)
		sums[label(m, "zone")] += v
		if prev, ok := g.max[k]; ok && v < prev {
			g.drops = append(g.drops, fmt.Sprintf("%s: %v after %v", k, v, prev))
		}
		g.max[k] = math.Max(g.max[k], v)
	}
	for z, sum := range sums {
		if sum < g.zones[z] {
			g.drops = append(g.drops, fmt.Sprintf("zone %s: node energy sum %v after %v", z, sum, g.zones[z]))
		}
		g.zones[z] = math.Max(g.zones[z], sum)
	}
	return fams, nil
}

// nodeJ is the guest's node energy: every zone, idle and dynamic.
func nodeJ(fams families) float64 {
	v, _ := sumWhere(fams, "wattrace_node_energy_joules_total", nil)
	return v
}

// settled waits until the guest's node energy has not moved for 4 s (it
// has read the host's last figures) and returns it.
func (g *guestWatch) settled(t *testing.T) float64 {
	t.Helper()
	last, since := -1.0, time.Now()
	start := since
	var trace []string
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		fams, err := g.scrape()
		if err != nil {
			trace = append(trace, fmt.Sprintf("%v: %v", time.Since(start).Round(time.Millisecond), err))
			continue
		}
		v := nodeJ(fams)
		if v != last {
			trace = append(trace, fmt.Sprintf("%v: %.6f J", time.Since(start).Round(time.Millisecond), v))
			last, since = v, time.Now()
			continue
		}
		if time.Since(since) >= 4*time.Second {
			return v
		}
	}
	t.Fatalf("the guest's node energy did not settle in 40 s (last %v J); its changes: %s", last, strings.Join(trace, ", "))
	return 0
}

// shareJ is the share's counters summed, and its metadata.
func shareJ(t *testing.T, dir string) (float64, *hostshare.Meta) {
	t.Helper()
	zones, meta := shareZones(t, dir)
	var j float64
	for _, z := range meta.Zones {
		j += zones[z.Name]
	}
	return j, meta
}

// hostMatchesShare polls until a scrape of the host and the share describe
// the same interval (wattrace_stats_last_update_timestamp_seconds equals the
// metadata's update time) and returns the host's energy for the VM and the
// share's counter then.
func hostMatchesShare(t *testing.T, h *exporter, dir string) (hostJ, fileJ float64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		fams, err := h.scrape()
		if err != nil {
			continue
		}
		ts, _ := sum(fams, "wattrace_stats_last_update_timestamp_seconds", nil)
		f, meta := shareJ(t, dir)
		if math.Abs(float64(meta.Updated.UnixNano())/1e9-ts) > 1e-3 {
			continue
		}
		hv, n := sumWhere(fams, "wattrace_vm_energy_joules_total", labelsEq(map[string]string{"vm_uuid": guestUUID}))
		if n == 0 {
			continue
		}
		return hv, f
	}
	t.Fatalf("no scrape of the host matched the share's update time in 20 s")
	return 0, 0
}

// TestGuestHostShare runs a real Linux guest (Debian's kernel, a busybox
// initramfs holding the exporter built without cgo) as a libvirt domain,
// the host exporter attributing the VM's energy and publishing it to the
// domain's share, which the guest mounts over virtio-9p and uses as its
// meter. Asserts: the share holds exactly the host's figure for the VM;
// over a window the guest's node energy equals the host's figure within
// 1%; a host exporter restart never makes a guest counter decrease (the
// share continues from what it held); removing the share makes the guest
// report the host source down and then estimate.
func TestGuestHostShare(t *testing.T) {
	b := newGuestBed(t)
	begin := time.Now()
	hostSource, share := b.hostSource, b.share
	b.boot(t, 512, "--web.listen-address=:9841", "--stats.interval=1s", "--accounting.mode=procfs",
		"--power.host-share.staleness="+guestStaleness.String())
	t.Logf("guest %s started after %v", guestVM, time.Since(begin).Round(time.Millisecond))

	// The host's meter: a RAPL package counter (this machine has none)
	// that the test advances at 20 W.
	sysfs := raplFixture(t, filepath.Join(b.work, "sys"), 20)
	addr := fmt.Sprintf("localhost:%d", freePort(t))
	hostArgs := b.hostArgs(sysfs)
	h := startExporterAt(t, addr, hostArgs...)

	// The guest boots, finds its share and serves measured figures.
	g := b.watch(t)
	fams := b.waitMeasured(t, g)
	t.Logf("guest serving measured figures after %v", time.Since(begin).Round(time.Millisecond))
	dump(t, fams, nil, "wattrace_node_energy_joules_total", "wattrace_source_up")

	// The share is the host's figure for the VM.
	hv, fv := hostMatchesShare(t, h, share)
	t.Logf("host: wattrace_vm_energy_joules_total{vm_uuid=%q} %.6f J, share %.6f J", guestUUID, hv, fv)
	if !within(fv, hv, 1e-6) {
		t.Errorf("share %.6f J, host's figure for the VM %.6f J: want equal", fv, hv)
	}

	// Window: from the host's figures frozen (exporter stopped) to the
	// next freeze after a restart.
	h.stop()
	f1, m1 := shareJ(t, share)
	g1 := g.settled(t)
	t0 := time.Now()
	h2 := startExporterAt(t, addr, hostArgs...)
	t.Logf("host exporter restarted in %v", time.Since(t0).Round(time.Millisecond))
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		_, _ = g.scrape()
	}
	hv2, fv2 := hostMatchesShare(t, h2, share)
	t.Logf("after the restart: host %.6f J for the VM, share %.6f J = %.6f J before + %.6f J", hv2, fv2, f1, fv2-f1)
	if !within(fv2-f1, hv2, 1e-5) {
		t.Errorf("share grew %.6f J since the restart, the host's figure is %.6f J: want the share to continue from what it held", fv2-f1, hv2)
	}
	h2.stop()
	f2, m2 := shareJ(t, share)
	g2 := g.settled(t)
	checkWindow(t, t0, m1, m2, f2-f1, g2-g1)

	// Bad input through the real 9p path: garbage, a decreasing counter
	// and an absurd rate are rejected, counted, and never credited.
	badInput(t, g, share, m2, hostSource)

	// Removing the share: the host source is reported down, then the
	// estimator stands in, named in the labels.
	for _, f := range append([]string{hostshare.MetaFile}, zoneFiles(m2)...) {
		if err := os.Remove(filepath.Join(share, f)); err != nil {
			t.Fatal(err)
		}
	}
	checkGuestEstimates(t, g, hostSource, "the share removed")
	if len(g.drops) > 0 {
		t.Errorf("guest counters decreased: %v", g.drops)
	}
	t.Logf("TestGuestHostShare took %v", time.Since(begin).Round(time.Millisecond))
}

// checkWindow holds a window that began at t0 and spans a host exporter
// restart, its ends' share metadata m1 and m2: the restart did not reset
// the share, and the guest's node energy grew by the host's figure for
// the VM (host J, the share's growth) within 1%.
func checkWindow(t *testing.T, t0 time.Time, m1, m2 *hostshare.Meta, host, guest float64) {
	t.Helper()
	if m2.Epoch != m1.Epoch || m2.Resets != 0 {
		t.Errorf("epoch %q→%q, resets %d: a restart must not reset the share", m1.Epoch, m2.Epoch, m2.Resets)
	}
	t.Logf("window %v: host's figure for the VM +%.4f J, guest's node energy +%.4f J (%+.4f%%)",
		time.Since(t0).Round(time.Millisecond), host, guest, pct(guest, host))
	if host <= 0 || !within(guest, host, 0.01) {
		t.Errorf("over the window the guest's node energy grew %.4f J, the host's figure %.4f J: want within 1%%", guest, host)
	}
}

// badInput writes, with the host stopped, three bad values of the share's
// package counter (each with a new metadata sequence, so the share stays
// fresh) and waits for the guest to count each rejection by its reason;
// its node energy must not move.
func badInput(t *testing.T, g *guestWatch, share string, m *hostshare.Meta, hostSource string) {
	t.Helper()
	good, _ := shareJ(t, share)
	before := g.settled(t)
	for _, bad := range []struct {
		reason, content string
	}{
		{"unreadable", "12abc"},
		{"backwards", fmt.Sprint(uint64((good - 5) * 1e6))},
		{"too_fast", fmt.Sprint(uint64((good + 1e9) * 1e6))}, // 1 GJ in a second or two
	} {
		fams, err := g.scrape()
		if err != nil {
			t.Fatal(err)
		}
		sel := map[string]string{"source": hostSource, "reason": bad.reason}
		n0, _ := sum(fams, "wattrace_source_rejected_readings_total", sel)
		if err := hostshare.WriteAtomic(share, hostshare.ZoneFile("package"), []byte(bad.content)); err != nil {
			t.Fatal(err)
		}
		m.Seq++
		m.Updated = time.Now()
		meta, _ := json.Marshal(m)
		if err := hostshare.WriteAtomic(share, hostshare.MetaFile, meta); err != nil {
			t.Fatal(err)
		}
		var n float64
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
			if fams, err = g.scrape(); err == nil {
				if n, _ = sum(fams, "wattrace_source_rejected_readings_total", sel); n > n0 {
					break
				}
			}
		}
		t.Logf("share's counter %q: wattrace_source_rejected_readings_total{reason=%q} %v -> %v", bad.content, bad.reason, n0, n)
		if n <= n0 {
			t.Errorf("the guest did not reject %q as %s", bad.content, bad.reason)
		}
	}
	// Put the good value back; nothing of the bad ones was credited.
	if err := hostshare.WriteAtomic(share, hostshare.ZoneFile("package"), hostshare.FormatCounter(good)); err != nil {
		t.Fatal(err)
	}
	if after := g.settled(t); after != before {
		t.Errorf("the guest's node energy moved from %v to %v J on rejected readings", before, after)
	}
}

// checkGuestEstimates holds the guest to what it does once its host's
// figures are gone (gone says how, for messages: the share removed, the
// host exporter gone): the host source is reported down, then the
// estimator stands in, named in the labels.
func checkGuestEstimates(t *testing.T, g *guestWatch, hostSource, gone string) {
	t.Helper()
	since := time.Now()
	var down, estimating time.Duration
	estJ0 := -1.0
	for deadline := time.Now().Add(guestStaleness + 40*time.Second); time.Now().Before(deadline) && estimating == 0; time.Sleep(500 * time.Millisecond) {
		fams, err := g.scrape()
		if err != nil {
			continue
		}
		if up, ok := sum(fams, "wattrace_source_up", map[string]string{"source": hostSource}); ok && up == 0 && down == 0 {
			down = time.Since(since)
		}
		est, n := sumWhere(fams, "wattrace_node_energy_joules_total", labelsEq(map[string]string{"source": "estimator", "method": "estimated"}))
		switch {
		case n == 0:
		case estJ0 < 0:
			estJ0 = est
		case est > estJ0:
			estimating = time.Since(since)
			dump(t, fams, nil, "wattrace_node_energy_joules_total", "wattrace_source_up", "wattrace_source_read_errors_total")
		}
	}
	t.Logf("%s: host source down after %v, estimating after %v (staleness %v)", gone, down.Round(time.Millisecond), estimating.Round(time.Millisecond), guestStaleness)
	if down == 0 {
		t.Errorf("wattrace_source_up{source=%q} never went to 0 with %s", hostSource, gone)
	}
	if estimating == 0 || estimating < down {
		t.Errorf("no growing method=\"estimated\" source=\"estimator\" node energy after the host was reported down")
	}
}

// raplFixture makes a sysfs tree whose one powercap zone (package-0)
// counts watts W until the test ends (written atomically, as the kernel's
// reads are); devices/ is the host's, for the CPU topology.
func raplFixture(t *testing.T, root string, watts float64) string {
	t.Helper()
	return raplFixtureZones(t, root, fixtureZone{"intel-rapl:0", "package-0", watts})
}

// fixtureZone is one powercap zone of a RAPL fixture: its directory under
// class/powercap (intel-rapl:0, or intel-rapl:0:0 for a sub-zone of the
// package), its name and the watts it counts.
type fixtureZone struct {
	dir, name string
	watts     float64
}

// raplFixtureZones is raplFixture with the given zones, each counting
// its watts.
func raplFixtureZones(t *testing.T, root string, zones ...fixtureZone) string {
	t.Helper()
	return switchedRAPLZones(t, root, zones...).root
}

// raplSwitch is a RAPL fixture's sysfs tree whose zones count their watts
// while on (from the start) and stand still while off: the host's
// figures for a VM then stop growing, and a guest's reading catches up
// with them, so a window's ends are exact.
type raplSwitch struct {
	root string
	on   atomic.Bool
}

func (r *raplSwitch) set(on bool) { r.on.Store(on) }

// switchedRAPL is raplFixture's tree with its switch.
func switchedRAPL(t *testing.T, root string, watts float64) *raplSwitch {
	t.Helper()
	return switchedRAPLZones(t, root, fixtureZone{"intel-rapl:0", "package-0", watts})
}

// switchedRAPLZones makes the tree with the given zones under root, on,
// and counts until the test ends (written atomically, as the kernel's
// reads are); devices/ is the host's, for the CPU topology.
func switchedRAPLZones(t *testing.T, root string, zones ...fixtureZone) *raplSwitch {
	t.Helper()
	r := &raplSwitch{root: root}
	r.on.Store(true)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/sys/devices", filepath.Join(root, "devices")); err != nil {
		t.Fatal(err)
	}
	write := func(zone, name string, v uint64) {
		tmp := filepath.Join(zone, "."+name)
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d\n", v)), 0o644); err == nil {
			_ = os.Rename(tmp, filepath.Join(zone, name))
		}
	}
	dirs := make([]string, len(zones))
	for i, z := range zones {
		dirs[i] = filepath.Join(root, "class", "powercap", z.dir)
		if err := os.MkdirAll(dirs[i], 0o755); err != nil {
			t.Fatal(err)
		}
		write(dirs[i], "max_energy_range_uj", 262143328850)
		if err := os.WriteFile(filepath.Join(dirs[i], "name"), []byte(z.name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		write(dirs[i], "energy_uj", 0)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		uj := make([]float64, len(zones))
		last := time.Now()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				if r.on.Load() {
					for i, z := range zones {
						uj[i] += z.watts * now.Sub(last).Seconds() * 1e6
						write(dirs[i], "energy_uj", uint64(uj[i]))
					}
				}
				last = now
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return r
}

func zoneFiles(m *hostshare.Meta) []string {
	var out []string
	for _, z := range m.Zones {
		out = append(out, hostshare.ZoneFile(z.Name))
	}
	return out
}
