package guestshare

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/power/hostshare"
)

const (
	uuidB     = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
	testPort  = 5924
	cidA      = 41
	cidB      = 42
	cidNobody = 43
)

// shortRoot is a share root short enough for the domains' Unix sockets
// (107 bytes at most), which t.TempDir's long paths can exceed.
func shortRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// vsockWriter is a writer serving over vsock whose domains' context ids
// are web01's cidA and db's cidB.
func vsockWriter(t *testing.T, root string) *Writer {
	t.Helper()
	w, err := New(Config{Dir: root, Interval: time.Second, IdlePolicy: "even", Host: "hv1", BootID: "b1",
		VsockPort: testPort, CIDs: func(cid uint32) (string, string, bool) {
			switch cid {
			case cidA:
				return uuid, "web01", true
			case cidB:
				return uuidB, "db", true
			}
			return "", "", false
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func socketOf(root, uuid string) string {
	return filepath.Join(root, "uuid-"+strings.ToLower(uuid), VsockSocket(testPort))
}

// frameOf reads what a connection gets: the share's metadata and package
// counter in joules, or ok false when the host wrote nothing.
func frameOf(t *testing.T, r io.Reader) (m *hostshare.Meta, joules float64, ok bool) {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := r.(io.Closer); ok {
		c.Close()
	}
	if len(b) == 0 {
		return nil, 0, false
	}
	f, err := hostshare.DecodeFrame(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if m, err = hostshare.ParseMeta(f.Meta); err != nil {
		t.Fatal(err)
	}
	uj, err := hostshare.ParseCounter(f.Counters["package"])
	if err != nil {
		t.Fatal(err)
	}
	return m, float64(uj) / 1e6, true
}

// The host's writer and the guest's meter over a real Unix socket (the
// hybrid-vsock transport): the guest reads what the domain's directory
// holds, and its energy grows by exactly what the host's counter grew.
func TestVsockHostToGuest(t *testing.T) {
	root := shortRoot(t)
	w := vsockWriter(t, root)
	if err := w.Write(vmSnap(1, [3]any{uuid, "web01", 10.0}, [3]any{uuidB, "db", 500.0})); err != nil {
		t.Fatal(err)
	}
	dial := func(ctx context.Context) (io.ReadCloser, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socketOf(root, uuid))
	}
	m, err := hostshare.Open(hostshare.Options{Dial: dial, Where: "test", Staleness: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "host:hv1" {
		t.Fatalf("name %q", m.Name())
	}
	if _, err := m.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	dirA := filepath.Join(root, "uuid-"+strings.ToLower(uuid))
	before := fileJ(t, dirA)
	if err := w.Write(vmSnap(2, [3]any{uuid, "web01", 22.5}, [3]any{uuidB, "db", 900.0})); err != nil {
		t.Fatal(err)
	}
	ss, err := m.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, s := range ss {
		got += s.Joules
	}
	if host := fileJ(t, dirA) - before; got != host || got != 12.5 {
		t.Errorf("the guest read %v J over vsock; the share's directory grew %v J, want both 12.5", got, host)
	}
	if e, seq := m.Update(); seq != 2 || e == "" {
		t.Errorf("update %q/%d, want the writer's second", e, seq)
	}
	// The frame holds the directory's very metadata.
	meta, err := hostshare.ReadMeta(dirA)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", socketOf(root, uuid))
	if err != nil {
		t.Fatal(err)
	}
	fm, _, _ := frameOf(t, c)
	if fm.Epoch != meta.Epoch || fm.Seq != meta.Seq || !fm.Updated.Equal(meta.Updated) || fm.IntervalSeconds != meta.IntervalSeconds {
		t.Errorf("frame meta %+v, directory's %+v", fm, meta)
	}
}

// fromCID is a connection that says it comes from a vsock context id.
type fromCID struct {
	net.Conn
	cid uint32
}

func (c fromCID) RemoteAddr() net.Addr { return &vsock.Addr{ContextID: c.cid, Port: 1234} }

// askAs serves one AF_VSOCK connection from cid, the guest first writing
// ask (what it would like to get, which the host never reads), and
// returns what the guest got.
func askAs(t *testing.T, w *Writer, cid uint32, ask string) (*hostshare.Meta, float64, bool) {
	t.Helper()
	host, guest := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.srv.serve(fromCID{host, cid}, w.srv.byCID)
	}()
	_ = guest.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = guest.Write([]byte(ask)) // unread: times out on the pipe
	m, j, ok := frameOf(t, guest)
	<-done
	return m, j, ok
}

// A guest gets its own share and never another's: on AF_VSOCK the host
// picks the share by the peer's context id (the host kernel's word),
// whatever the guest sends; an unknown context id gets nothing, and so
// does a domain with no share yet. On hybrid vsock a connection on a
// domain's socket gets that domain's share, whatever the guest sends.
func TestVsockGuestGetsOnlyItsOwnShare(t *testing.T) {
	root := shortRoot(t)
	w := vsockWriter(t, root)
	if err := w.Write(vmSnap(1, [3]any{uuid, "web01", 10.0})); err != nil {
		t.Fatal(err)
	}
	if m, j, ok := askAs(t, w, cidA, "uuid-"+uuidB+"\n"); !ok || !strings.EqualFold(m.Domain.UUID, uuid) || j != 10 {
		t.Errorf("context id of web01 asking for db's share: got %+v %v J (ok %v), want web01's 10 J", m, j, ok)
	}
	if m, _, ok := askAs(t, w, cidB, ""); ok {
		t.Errorf("db has no share yet, its context id got %+v", m)
	}
	if m, _, ok := askAs(t, w, cidNobody, "uuid-"+strings.ToLower(uuid)+"\n"); ok {
		t.Errorf("a context id of no domain got %+v", m)
	}
	if m, _, ok := askAs(t, w, 2, ""); ok {
		t.Errorf("the host's context id got %+v", m)
	}
	if err := w.Write(vmSnap(2, [3]any{uuid, "web01", 11.0}, [3]any{uuidB, "db", 700.0})); err != nil {
		t.Fatal(err)
	}
	if m, j, ok := askAs(t, w, cidB, ""); !ok || m.Domain.UUID != uuidB || j != 700 {
		t.Errorf("db's context id: got %+v %v J (ok %v), want db's 700 J", m, j, ok)
	}
	// Hybrid: the socket decides, not what the guest writes.
	c, err := net.Dial("unix", socketOf(root, uuidB))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("uuid-" + strings.ToLower(uuid) + "\n"))
	if m, j, ok := frameOf(t, c); !ok || m.Domain.UUID != uuidB || j != 700 {
		t.Errorf("db's socket, asking for web01's: got %+v %v J (ok %v), want db's 700 J", m, j, ok)
	}
}

// The sockets go with the writer: a guest then reads nothing, as from a
// host without wattrace. A socket an exporter that died left behind is
// replaced; a file that is no socket is left alone, and the domain is
// served on AF_VSOCK only.
func TestVsockSocketsLifecycle(t *testing.T) {
	root := shortRoot(t)
	dirA := filepath.Join(root, "uuid-"+strings.ToLower(uuid))
	dirB := filepath.Join(root, "uuid-"+uuidB)
	for _, d := range []string{dirA, dirB} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A dead exporter's socket at A's path; a file at B's.
	stale, err := net.Listen("unix", socketOf(root, uuid))
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if err := os.WriteFile(socketOf(root, uuidB), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := vsockWriter(t, root)
	if err := w.Write(vmSnap(1, [3]any{uuid, "web01", 10.0}, [3]any{uuidB, "db", 5.0})); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", socketOf(root, uuid))
	if err != nil {
		t.Fatalf("web01's socket, over a stale one: %v", err)
	}
	if _, j, ok := frameOf(t, c); !ok || j != 10 {
		t.Errorf("web01's socket: %v J (ok %v)", j, ok)
	}
	fi, err := os.Stat(socketOf(root, uuid))
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Errorf("web01's socket: %v %v, want a socket 0666 (as readable as the files)", fi.Mode(), err)
	}
	if b, err := os.ReadFile(socketOf(root, uuidB)); err != nil || string(b) != "mine" {
		t.Errorf("the file at db's socket path: %q, %v; want it untouched", b, err)
	}
	if _, j, ok := askAs(t, w, cidB, ""); !ok || j != 5 {
		t.Errorf("db over AF_VSOCK: %v J (ok %v)", j, ok)
	}
	w.Close()
	if _, err := os.Lstat(socketOf(root, uuid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("web01's socket after Close: %v, want it gone", err)
	}
	if _, err := net.Dial("unix", socketOf(root, uuid)); err == nil {
		t.Error("a connection succeeded after Close")
	}
}

// With guests.share.group the sockets, like the files, are for QEMU's
// group only (connecting takes write permission).
func TestVsockSocketGroupMode(t *testing.T) {
	root := shortRoot(t)
	w, err := New(Config{Dir: root, Interval: time.Second, Host: "hv1", Group: strconv.Itoa(os.Getgid()), VsockPort: testPort})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Write(vmSnap(1, [3]any{uuid, "web01", 10.0})); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(socketOf(root, uuid))
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket %v %v, want 0660", fi.Mode(), err)
	}
}

// On real AF_VSOCK the host names the domain by the peer context id the
// kernel gives the accepted connection. It needs a kernel with
// vhost-vsock (the listener is opened only where /dev/vhost-vsock exists)
// and the loopback transport, whose connections come from context id 1
// (VMADDR_CID_LOCAL): the end-to-end tests run it in a real guest that
// loads both (TestVsockByContextIDInGuest). Nowhere else is it
// attempted: on a machine that is itself a guest, a vsock connection to
// any other context id goes to its hypervisor.
func TestVsockByContextID(t *testing.T) {
	if _, err := os.Stat(vhostVsockDev); err != nil {
		testenv.NotApplicable(t, "no %s: a host whose guests use vhost-vsock has it", vhostVsockDev)
	}
	if _, err := os.Stat("/sys/module/vsock_loopback"); err != nil {
		testenv.NotApplicable(t, "no vsock loopback transport (vsock_loopback) to connect to oneself with")
	}
	root := shortRoot(t)
	const local = unix.VMADDR_CID_LOCAL
	var asked []uint32
	w, err := New(Config{Dir: root, Interval: time.Second, Host: "hv1", VsockPort: testPort,
		CIDs: func(cid uint32) (string, string, bool) {
			asked = append(asked, cid)
			return uuid, "web01", cid == local
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.srv.vsockL == nil {
		t.Fatal("no AF_VSOCK listener with vhost-vsock present")
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := vsock.Dial(local, testPort, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		return c
	}
	if m, _, ok := frameOf(t, dial()); ok {
		t.Errorf("before the domain's first share: got %+v, want nothing", m)
	}
	if err := w.Write(vmSnap(1, [3]any{uuid, "web01", 10.0})); err != nil {
		t.Fatal(err)
	}
	m, j, ok := frameOf(t, dial())
	if !ok || !strings.EqualFold(m.Domain.UUID, uuid) || j != 10 {
		t.Errorf("connection from context id %d: got %+v %v J (ok %v), want web01's 10 J", local, m, j, ok)
	}
	if len(asked) == 0 || asked[len(asked)-1] != local {
		t.Errorf("context ids looked up %v, want the peer's, %d", asked, local)
	}
	// The guest's meter over the real socket: the host's figure.
	hm, err := hostshare.Open(hostshare.Options{Dial: func(context.Context) (io.ReadCloser, error) { return dial(), nil }, Where: "vsock:1", Staleness: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hm.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(vmSnap(2, [3]any{uuid, "web01", 17.5})); err != nil {
		t.Fatal(err)
	}
	ss, err := hm.Read(context.Background())
	if err != nil || len(ss) != 1 || ss[0].Joules != 7.5 || hm.Name() != "host:hv1" {
		t.Errorf("the guest's meter over AF_VSOCK: %+v %v (%s), want 7.5 J from host:hv1", ss, err, hm.Name())
	}
	t.Logf("AF_VSOCK: context ids looked up %v; the meter read %+v", asked, ss)
}
