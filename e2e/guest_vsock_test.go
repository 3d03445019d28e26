//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	work := t.TempDir()
	// The domain's socket is <root>/uuid-<uuid>/vsock_<port>: at most
	// 107 bytes, more than t.TempDir's long names leave room for.
	shareRoot, err := os.MkdirTemp("", "wtv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shareRoot) })
	b := startGuestBed(t, work, shareRoot)
	hostSource, share := b.hostSource, b.share
	dev, backend := startVsockBackend(t, b)
	b.bootDomain(t, guestDomain{memMiB: 512, vsockBackend: backend}, "--web.listen-address=:9841", "--stats.interval=1s", "--accounting.mode=procfs",
		fmt.Sprintf("--power.host-share.vsock-port=%d", guestVsockPort),
		"--power.host-share.staleness="+guestStaleness.String())
	t.Logf("guest %s started after %v", guestVM, time.Since(begin).Round(time.Millisecond))

	rapl := switchedRAPL(t, filepath.Join(work, "sys"), 20)
	addr := fmt.Sprintf("localhost:%d", freePort(t))
	hostArgs := b.hostArgs(rapl.root, fmt.Sprintf("--guests.share.vsock-port=%d", guestVsockPort))
	h := startExporterAt(t, addr, hostArgs...)

	g := b.watch(t)
	fams := b.waitMeasured(t, g)
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
	checkWindow(t, t0, m1, m2, f2-f1, g2-g1)
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
	checkGuestEstimates(t, g, hostSource, "the host exporter gone")
	if len(g.drops) > 0 {
		t.Errorf("guest counters decreased: %v", g.drops)
	}
	if b, err := os.ReadFile(filepath.Join(share, hostshare.MetaFile)); err == nil {
		t.Logf("share meta: %s", b)
	}
	t.Logf("TestGuestHostShareVsock took %v", time.Since(begin).Round(time.Millisecond))
}

// startVsockBackend starts the vsock device's backend, and the guest bed
// b reads its share through it (over vsock); QEMU connects to it when the
// domain starts. A guest's connection to the host's port P reaches
// <share>/vsock_P: the domain's own socket. Once the bed's domain is torn
// down, it waits for the backend to end.
func startVsockBackend(t *testing.T, b *guestBed) (*vhostuser.Device, string) {
	t.Helper()
	backend := filepath.Join(b.shareRoot, "vhost-user-vsock.sock")
	dev := &vhostuser.Device{GuestCID: guestCID, UDS: filepath.Join(b.share, "vsock"), Logf: t.Logf}
	ready, served := make(chan struct{}), make(chan error, 1)
	go func() { served <- dev.Serve(backend, ready) }()
	<-ready

	b.over = " over vsock"
	b.stuck = func() string {
		return fmt.Sprintf("backend: %d connections forwarded, %d refused", dev.Stats().Connects.Load(), dev.Stats().Refused.Load())
	}
	b.torndown = append(b.torndown, func() {
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
