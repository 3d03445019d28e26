//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wattrace/wattrace/e2e/vhostuser"
	"github.com/wattrace/wattrace/internal/guestshare"
	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/power/hostshare"
)

const (
	// guestVsockPort is the host's guests.share.vsock-port and the
	// guest's power.host-share.vsock-port.
	guestVsockPort = 5924
	guestCID       = 3
)

// guestVsockDomainXML is the libvirt domain of the guest reading its
// share over vsock: no shared directory, the guest's memory a shared
// memfd (a vhost-user device reads the rings and buffers in it), and
// QEMU's vhost-user-vsock-pci device connected to the backend at
// backend. libvirt 9.0 (Debian 12) has no vhost-user vsock of its own
// (its <vsock> is the kernel's vhost-vsock, which this machine lacks), so
// the device comes in on QEMU's command line, as the user network does.
func guestVsockDomainXML(work, backend string, port int) string {
	return fmt.Sprintf(`<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>%s</name>
  <uuid>%s</uuid>
  <memory unit='MiB'>512</memory>
  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>%s/vmlinuz</kernel>
    <initrd>%s/initrd.gz</initrd>
    <cmdline>console=ttyS0 quiet panic=-1</cmdline>
  </os>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <serial type='file'><source path='%s/console.log'/><target port='0'/></serial>
    <memballoon model='none'/>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-netdev'/>
    <qemu:arg value='user,id=wtnet,hostfwd=tcp:127.0.0.1:%d-:9841'/>
    <qemu:arg value='-device'/>
    <qemu:arg value='virtio-net-pci,netdev=wtnet,bus=pci.0,addr=0x10'/>
    <qemu:arg value='-chardev'/>
    <qemu:arg value='socket,id=wtvsock,path=%s'/>
    <qemu:arg value='-device'/>
    <qemu:arg value='vhost-user-vsock-pci,chardev=wtvsock,bus=pci.0,addr=0x11'/>
  </qemu:commandline>
</domain>
`, guestVM, guestUUID, work, work, work, port, backend)
}

// TestGuestHostShareVsock is TestGuestHostShare for a host that cannot
// share a directory: the same real guest (Debian's kernel, the exporter
// in a busybox initramfs) as a libvirt domain with no shared directory,
// reading its share over vsock. The guest's kernel's virtio vsock
// transport connects to the host (context id 2) on guests.share.vsock-port
// through QEMU's vhost-user-vsock-pci device and a vhost-user backend
// (e2e/vhostuser: hybrid vsock, as vhost-device-vsock, Firecracker and
// Cloud Hypervisor do it), which forwards the connection to the
// domain's socket in its share directory, where the host exporter
// answers with the domain's share. Asserts: the share holds the host's
// figure for the VM; over a window spanning a host exporter restart the
// guest's node energy grows by the host's figure within 1%; the guest
// read it over vsock (the backend forwarded its connections; the
// guest's reads of the host source count on); with the host exporter
// gone the guest reports the host down and then estimates.
func TestGuestHostShareVsock(t *testing.T) {
	requireRoot(t)
	libvirtLock(t) // the guest bed's domain and daemons: one test at a time
	begin := time.Now()
	hostName, _ := os.Hostname()
	hostSource := "host:" + hostName
	work := t.TempDir()
	// The domain's socket is <root>/uuid-<uuid>/vsock_<port>: at most
	// 107 bytes, more than t.TempDir's long names leave room for.
	shareRoot, err := os.MkdirTemp("", "wtv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shareRoot) })
	share := filepath.Join(shareRoot, "uuid-"+strings.ToLower(guestUUID))
	if err := os.MkdirAll(share, 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	bin := exporterBinary(t)

	dev, backend := startVsockBackend(t, work, shareRoot, share)
	startVsockGuest(t, work, bin, backend, port)
	t.Logf("guest %s started after %v", guestVM, time.Since(begin).Round(time.Millisecond))

	rapl := switchedRAPL(t, filepath.Join(work, "sys"), 20)
	sysfs := rapl.root
	addr := fmt.Sprintf("localhost:%d", freePort(t))
	hostArgs := []string{"--accounting.mode=bpf", "--cgroup.hierarchy=v2", "--path.sysfs=" + sysfs, "--power.source=rapl",
		"--power.idle-policy=even", "--guests.share.path=" + shareRoot, "--guests.share.interval=1s",
		fmt.Sprintf("--guests.share.vsock-port=%d", guestVsockPort)}
	h := startExporterAt(t, addr, hostArgs...)

	g := &guestWatch{t: t, e: &exporter{url: fmt.Sprintf("http://127.0.0.1:%d", port)}, max: map[string]float64{}}
	fams := waitGuestVsock(t, g, dev, hostSource)
	t.Logf("guest serving measured figures over vsock after %v", time.Since(begin).Round(time.Millisecond))
	dump(t, fams, nil, "wattrace_node_energy_joules_total", "wattrace_source_up")
	if _, err := os.Stat(filepath.Join(share, guestshare.VsockSocket(guestVsockPort))); err != nil {
		t.Errorf("the domain's socket: %v", err)
	}

	// The share is the host's figure for the VM.
	hv, fv := hostMatchesShare(t, h, share)
	t.Logf("host: wattrace_vm_energy_joules_total{vm_uuid=%q} %.6f J, share %.6f J", guestUUID, hv, fv)
	if !within(fv, hv, 1e-6) {
		t.Errorf("share %.6f J, host's figure for the VM %.6f J: want equal", fv, hv)
	}

	// Window: from the host's figures frozen to their next freeze, with
	// a host exporter restart in between (its sockets go, the guest's
	// reads fail, and the share continues when it is back). The figures
	// freeze with the node's meter, not with the exporter: a stopped
	// exporter's last update is in its files but no longer served, so a
	// guest over vsock sees it only once the exporter is back.
	frozen := func() (fileJ, guestJ float64, m *hostshare.Meta) {
		rapl.set(false)
		time.Sleep(2 * time.Second) // the host's interval and the guest's read that follow
		g0 := g.settled(t)
		f, meta := shareJ(t, share)
		return f, g0, meta
	}
	reads0, _ := sum(g.e.mustScrape(t), "wattrace_source_reads_total", map[string]string{"source": hostSource})
	conns0 := dev.Stats().Connects.Load()
	f1, g1, m1 := frozen()
	t0 := time.Now()
	rapl.set(true)
	time.Sleep(10 * time.Second)
	h.stop()
	h2 := startExporterAt(t, addr, hostArgs...)
	t.Logf("host exporter restarted in %v", time.Since(t0).Round(time.Millisecond))
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		_, _ = g.scrape()
	}
	f2, g2, m2 := frozen()
	if m2.Epoch != m1.Epoch || m2.Resets != 0 {
		t.Errorf("epoch %q→%q, resets %d: a restart must not reset the share", m1.Epoch, m2.Epoch, m2.Resets)
	}
	host, guest := f2-f1, g2-g1
	t.Logf("window %v: host's figure for the VM +%.4f J, guest's node energy +%.4f J (%+.4f%%)",
		time.Since(t0).Round(time.Millisecond), host, guest, pct(guest, host))
	if host <= 0 || !within(guest, host, 0.01) {
		t.Errorf("over the window the guest's node energy grew %.4f J, the host's figure %.4f J: want within 1%%", guest, host)
	}
	hv2, fv2 := hostMatchesShare(t, h2, share)
	t.Logf("the restarted host: %.6f J for the VM, share %.6f J", hv2, fv2)
	fams = g.e.mustScrape(t)
	reads1, _ := sum(fams, "wattrace_source_reads_total", map[string]string{"source": hostSource})
	conns1 := dev.Stats().Connects.Load()
	t.Logf("over the window: the guest read the host source %v times, the backend forwarded %d vsock connections (%d refused in all), %d bytes to the guest",
		reads1-reads0, conns1-conns0, dev.Stats().Refused.Load(), dev.Stats().ToGuestBytes.Load())
	if conns1-conns0 < 10 || reads1-reads0 < 10 {
		t.Errorf("%d vsock connections forwarded, %v reads of %s over the window: want the guest reading over vsock (at least 10)", conns1-conns0, reads1-reads0, hostSource)
	}
	h2.stop()

	// With the host exporter gone (no socket for the domain: the backend
	// resets the guest's connections), the host source is down, then
	// the estimator stands in, named in the labels.
	checkGuestEstimates(t, g, hostSource)
	if len(g.drops) > 0 {
		t.Errorf("guest counters decreased: %v", g.drops)
	}
	if b, err := os.ReadFile(filepath.Join(share, hostshare.MetaFile)); err == nil {
		t.Logf("share meta: %s", b)
	}
	t.Logf("TestGuestHostShareVsock took %v", time.Since(begin).Round(time.Millisecond))
}

// startVsockBackend starts the vsock device's backend; QEMU connects to
// it when the domain starts. A guest's connection to the host's port P
// reaches <share>/vsock_P: the domain's own socket. Its cleanup tears the
// domain down and waits for the backend to end.
func startVsockBackend(t *testing.T, work, shareRoot, share string) (*vhostuser.Device, string) {
	t.Helper()
	backend := filepath.Join(shareRoot, "vhost-user-vsock.sock")
	dev := &vhostuser.Device{GuestCID: guestCID, UDS: filepath.Join(share, "vsock"), Logf: t.Logf}
	ready, served := make(chan struct{}), make(chan error, 1)
	go func() { served <- dev.Serve(backend, ready) }()
	<-ready

	t.Cleanup(func() {
		if t.Failed() {
			tailFile(t, filepath.Join(work, "guest", "console.log"), 40)
		}
		if _, err := script(t, 3*time.Minute, "libvirt.sh", "teardown"); err != nil {
			t.Errorf("libvirt.sh teardown: %v", err)
		}
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("vhost-user backend: %v", err)
			}
		case <-time.After(10 * time.Second):
			dev.Close() // QEMU never came, or never left
			if err := <-served; err != nil && !t.Failed() {
				t.Errorf("vhost-user backend still serving 10 s after the domain was torn down: %v", err)
			}
		}
	})
	return dev, backend
}

// startVsockGuest starts the libvirt daemons, builds the guest (the
// exporter reading its share over vsock) and defines and starts its
// domain with the vsock device's backend at backend.
func startVsockGuest(t *testing.T, work, bin, backend string, port int) {
	t.Helper()
	if _, err := script(t, 15*time.Minute, "libvirt.sh", "daemons"); err != nil {
		t.Fatalf("libvirt.sh daemons: %v", err)
	}
	if _, err := script(t, 10*time.Minute, "guest.sh", "build", filepath.Join(work, "guest"), bin,
		"--web.listen-address=:9841", "--stats.interval=1s", "--accounting.mode=procfs",
		fmt.Sprintf("--power.host-share.vsock-port=%d", guestVsockPort),
		"--power.host-share.staleness="+guestStaleness.String()); err != nil {
		t.Fatalf("guest.sh build: %v", err)
	}
	xml := filepath.Join(work, "guest", guestVM+".xml")
	if err := os.WriteFile(xml, []byte(guestVsockDomainXML(filepath.Join(work, "guest"), backend, port)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"LIBVIRT_DEFAULT_URI=qemu:///system"}
	for _, args := range [][]string{{"define", xml}, {"start", guestVM}} {
		if _, err := run(time.Minute, env, "virsh", args...); err != nil {
			t.Fatal(err)
		}
	}
}

// waitGuestVsock waits (3 min at most) for the guest to serve measured
// node energy from hostSource, read over vsock, and returns that scrape.
func waitGuestVsock(t *testing.T, g *guestWatch, dev *vhostuser.Device, hostSource string) families {
	t.Helper()
	var fams families
	var err error
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		if fams, err = g.scrape(); err == nil {
			ms := match(fams, "wattrace_node_energy_joules_total", labelsEq(map[string]string{"source": hostSource, "method": "measured"}))
			if len(ms) > 0 && nodeJ(fams) > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			if fams != nil {
				dump(t, fams, nil, "wattrace_node_energy_joules_total", "wattrace_source_up", "wattrace_source_reads_total",
					"wattrace_source_read_errors_total", "wattrace_source_rejected_readings_total")
			}
			t.Fatalf("the guest served no measured node energy from %s over vsock within 3 min (last error %v; backend: %d connections forwarded, %d refused)",
				hostSource, err, dev.Stats().Connects.Load(), dev.Stats().Refused.Load())
		}
	}
	return fams
}

// checkGuestEstimates holds the guest to what it does with the host
// exporter gone (no socket for the domain: the backend resets the
// guest's connections): the host source is down, then the estimator
// stands in, named in the labels.
func checkGuestEstimates(t *testing.T, g *guestWatch, hostSource string) {
	t.Helper()
	gone := time.Now()
	var down, estimating time.Duration
	estJ0 := -1.0
	for deadline := time.Now().Add(guestStaleness + 40*time.Second); time.Now().Before(deadline) && estimating == 0; time.Sleep(500 * time.Millisecond) {
		fams, err := g.scrape()
		if err != nil {
			continue
		}
		if up, ok := sum(fams, "wattrace_source_up", map[string]string{"source": hostSource}); ok && up == 0 && down == 0 {
			down = time.Since(gone)
		}
		est, n := sumWhere(fams, "wattrace_node_energy_joules_total", labelsEq(map[string]string{"source": "estimator", "method": "estimated"}))
		switch {
		case n == 0:
		case estJ0 < 0:
			estJ0 = est
		case est > estJ0:
			estimating = time.Since(gone)
		}
	}
	t.Logf("host exporter gone: host source down after %v, estimating after %v (staleness %v)", down.Round(time.Millisecond), estimating.Round(time.Millisecond), guestStaleness)
	if down == 0 {
		t.Errorf("wattrace_source_up{source=%q} never went to 0 with the host exporter gone", hostSource)
	}
	if estimating == 0 {
		t.Errorf("no growing method=\"estimated\" source=\"estimator\" node energy after the host was reported down")
	}
}

// switchedRAPL is a sysfs tree like raplFixture's whose package zone
// counts watts W while on (from the start) and stands still while off:
// the host's figures for the VM then stop growing, and a guest's reading
// catches up with them, so a window's ends are exact.
type raplSwitch struct {
	root string
	on   atomic.Bool
}

func (r *raplSwitch) set(on bool) { r.on.Store(on) }

func switchedRAPL(t *testing.T, root string, watts float64) *raplSwitch {
	t.Helper()
	r := &raplSwitch{root: root}
	r.on.Store(true)
	zone := filepath.Join(root, "class", "powercap", "intel-rapl:0")
	if err := os.MkdirAll(zone, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/sys/devices", filepath.Join(root, "devices")); err != nil {
		t.Fatal(err)
	}
	write := func(name string, v string) {
		tmp := filepath.Join(zone, "."+name)
		if err := os.WriteFile(tmp, []byte(v+"\n"), 0o644); err == nil {
			_ = os.Rename(tmp, filepath.Join(zone, name))
		}
	}
	write("max_energy_range_uj", "262143328850")
	write("name", "package-0")
	write("energy_uj", "0")
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var uj float64
		last := time.Now()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				if r.on.Load() {
					uj += watts * now.Sub(last).Seconds() * 1e6
					write("energy_uj", strconv.FormatUint(uint64(uj), 10))
				}
				last = now
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return r
}

// TestVsockByContextIDInGuest runs internal/guestshare's TestVsockByContextID
// in a real guest kernel (Debian's, booted by QEMU) that has what this
// machine's kernel lacks: vhost-vsock, so the host's AF_VSOCK listener
// opens, and the vsock loopback transport to connect to it with. It
// asserts that the test ran there and passed: the share a connection gets
// is the domain of the peer context id the kernel reports.
func TestVsockByContextIDInGuest(t *testing.T) {
	requireRoot(t)
	qemu := testenv.Tool(t, "qemu-system-x86_64", "qemu-system-x86")
	work := t.TempDir()
	bin := filepath.Join(work, "guestshare.test")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	if out, err := run(5*time.Minute, []string{"CGO_ENABLED=0"}, gobin, "test", "-c", "-o", bin, "../internal/guestshare"); err != nil {
		t.Fatalf("go test -c ./internal/guestshare: %v\n%s", err, out)
	}
	gw := filepath.Join(work, "guest")
	if _, err := script(t, 10*time.Minute, "guest.sh", "build", gw, bin, "-test.run=^TestVsockByContextID$", "-test.v", "-test.count=1"); err != nil {
		t.Fatalf("guest.sh build: %v", err)
	}
	start := time.Now()
	out, err := run(5*time.Minute, nil, qemu, "-machine", "pc,accel=tcg", "-m", "512", "-nographic", "-no-reboot", "-nic", "none",
		"-kernel", filepath.Join(gw, "vmlinuz"), "-initrd", filepath.Join(gw, "initrd.gz"), "-append", "console=ttyS0 quiet panic=-1")
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimRight(l, "\r"); strings.HasPrefix(strings.TrimSpace(l), "---") || strings.Contains(l, "vsock_test.go") ||
			strings.HasPrefix(l, "guest:") || strings.HasPrefix(l, "PASS") || strings.HasPrefix(l, "FAIL") {
			lines = append(lines, l)
		}
	}
	t.Logf("the guest ran in %v (qemu: %v):\n%s", time.Since(start).Round(time.Millisecond), errOrOK(err), strings.Join(lines, "\n"))
	if !strings.Contains(out, "--- PASS: TestVsockByContextID") || !strings.Contains(out, "guest: wattrace exited 0") {
		t.Errorf("TestVsockByContextID did not pass in the guest; its console:\n%s", out)
	}
}
