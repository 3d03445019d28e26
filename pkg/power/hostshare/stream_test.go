package hostshare

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// streamHost is a host serving whatever bytes the test sets, one copy per
// connection, over a real Unix socket (the hybrid-vsock transport).
type streamHost struct {
	t    *testing.T
	path string
	mu   sync.Mutex
	out  []byte
}

func newStreamHost(t *testing.T) *streamHost {
	t.Helper()
	dir, err := os.MkdirTemp("", "wts") // short: a Unix socket path is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &streamHost{t: t, path: filepath.Join(dir, "vsock_5924")}
	l, err := net.Listen("unix", h.path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			out := h.out
			h.mu.Unlock()
			_, _ = c.Write(out)
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return h
}

func (h *streamHost) set(b []byte) {
	h.mu.Lock()
	h.out = b
	h.mu.Unlock()
}

// share sets one update's frame, as the host's writer would encode it.
func (h *streamHost) share(m *Meta, at time.Time, joules map[string]float64) {
	h.t.Helper()
	m.Seq++
	m.Updated = at
	f, err := EncodeFrame(m, joules)
	if err != nil {
		h.t.Fatal(err)
	}
	h.set(f)
}

func (h *streamHost) dial(ctx context.Context) (io.ReadCloser, error) {
	return (&net.Dialer{}).DialContext(ctx, "unix", h.path)
}

func openStream(t *testing.T, h *streamHost, c *clock) *Meter {
	t.Helper()
	m, err := Open(Options{Dial: h.dial, Where: "test-stream", Staleness: 5 * time.Second, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func testMeta(zones ...string) *Meta {
	m := &Meta{Version: Version, Host: "hv1", Epoch: "e1", IntervalSeconds: 1,
		Domain: Domain{Name: "web01", UUID: "2a7d9e4b-1c3f-4a5b-8d6e-7f8091a2b3c4"}}
	for _, z := range zones {
		m.Zones = append(m.Zones, Zone{Name: z, Method: "measured", Source: "rapl", IdlePolicy: "even"})
	}
	return m
}

// A frame carries what the directory holds: the metadata as written and
// each counter as its file has it.
func TestFrameRoundTrip(t *testing.T) {
	m := testMeta("package", "dram")
	m.Seq, m.Updated = 7, time.Unix(1000, 0).UTC()
	b, err := EncodeFrame(m, map[string]float64{"package": 12.5, "dram": 0.000001})
	if err != nil {
		t.Fatal(err)
	}
	f, err := DecodeFrame(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseMeta(f.Meta)
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 7 || got.Host != "hv1" || len(got.Zones) != 2 || !got.Updated.Equal(m.Updated) {
		t.Errorf("meta %+v", got)
	}
	if string(f.Counters["package"]) != "12500000" || string(f.Counters["dram"]) != "1" || len(f.Counters) != 2 {
		t.Errorf("counters %q", f.Counters)
	}
}

// The guest's meter reads a share over a stream as it reads the
// directory: the host's counters' growth, named after the host, measured.
func TestMeterOverStream(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	h := newStreamHost(t)
	meta := testMeta("package", "dram")
	h.share(meta, c.now, map[string]float64{"package": 5000, "dram": 40})
	m := openStream(t, h, c)
	if m.Name() != "host:hv1" {
		t.Fatalf("name %q, want host:hv1 (from the first frame)", m.Name())
	}
	if j := joulesOf(read(t, m)); j != 0 {
		t.Fatalf("first read: %v J, want 0 (baseline)", j)
	}
	c.add(time.Second)
	h.share(meta, c.now, map[string]float64{"package": 5012.5, "dram": 41.25})
	ss := read(t, m)
	if p, d := sumJ(ss, "package"), sumJ(ss, "dram"); p != 12.5 || d != 1.25 {
		t.Fatalf("package %v J dram %v J, want 12.5 and 1.25", p, d)
	}
	if e, seq := m.Update(); e != "e1" || seq != 2 {
		t.Errorf("update %s/%d, want e1/2", e, seq)
	}
	if m.Stale() {
		t.Error("stale right after an update")
	}
	// A new epoch (the host's counters restarted from zero, marked) is a
	// fresh baseline over a stream too: nothing credited, nothing
	// rejected; the next update counts from it.
	meta.Epoch, meta.Seq, meta.Resets = "e2", 0, 1
	c.add(time.Second)
	h.share(meta, c.now, map[string]float64{"package": 3, "dram": 1})
	if j := joulesOf(read(t, m)); j != 13.75 || len(m.Rejected()) != 0 {
		t.Errorf("new epoch: total %v J, rejections %v; want 13.75 (unchanged) and none", j, m.Rejected())
	}
	c.add(time.Second)
	h.share(meta, c.now, map[string]float64{"package": 5, "dram": 1.5})
	if j := joulesOf(read(t, m)); j != 16.25 {
		t.Errorf("after the new epoch: total %v J, want 16.25 (13.75 + 2.5)", j)
	}
	// The share stale by its sequence: frames keep coming, the same
	// update each time, and after the staleness the host is down.
	for i := 0; i < 6; i++ {
		c.add(time.Second)
		read(t, m)
	}
	if h := m.Health()[0]; h.Up || !m.Stale() {
		t.Errorf("six seconds on the same update (staleness 5 s): health %+v, stale %v; want down, stale", h, m.Stale())
	}
	// The host closing without a frame (it has no share for this guest
	// yet) is a failed read, not a rejected reading.
	h.set(nil)
	c.add(time.Second)
	if _, err := m.Read(context.Background()); err == nil {
		t.Error("a connection without a frame read as a share")
	}
	if n := m.Rejected()["unreadable"]; n != 0 {
		t.Errorf("%d rejections for an empty connection, want 0", n)
	}
	if h := m.Health()[0]; h.Up || h.Errors != 1 {
		t.Errorf("health %+v: want down with one error", h)
	}
	if m.Name() != "host:hv1" {
		t.Errorf("name %q after a failed read, want host:hv1 still", m.Name())
	}
}

// Malformed and hostile frames are rejected, counted as unreadable and
// never credited; the counter goes on from its last good value.
func TestMeterRejectsBadFrames(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	h := newStreamHost(t)
	meta := testMeta("package")
	h.share(meta, c.now, map[string]float64{"package": 100})
	m := openStream(t, h, c)
	read(t, m)

	good, err := EncodeFrame(meta, map[string]float64{"package": 101})
	if err != nil {
		t.Fatal(err)
	}
	frame := func(body string) []byte {
		return binary.BigEndian.AppendUint32([]byte(FrameMagic), uint32(len(body))) // header
	}
	withBody := func(body string) []byte { return append(frame(body), body...) }
	metaJSON, _ := json.Marshal(meta)
	for _, tc := range []struct {
		name   string
		bytes  []byte
		reason string
	}{
		{"magic", append([]byte("HTTP"), good[4:]...), "unreadable"},
		{"zero length", frame(""), "unreadable"},
		{"huge length", binary.BigEndian.AppendUint32([]byte(FrameMagic), MaxFrame+1), "unreadable"},
		{"truncated body", good[:len(good)-3], "unreadable"},
		{"truncated header", good[:6], "unreadable"},
		{"bytes after", append(append([]byte{}, good...), 'x'), "unreadable"},
		{"not json", withBody("{meta"), "unreadable"},
		{"unknown field", withBody(`{"meta":` + string(metaJSON) + `,"counters":{"package":"1"},"cmd":"rm"}`), "unreadable"},
		{"no meta", withBody(`{"counters":{"package":"1"}}`), "unreadable"},
		{"no counters", withBody(`{"meta":` + string(metaJSON) + `}`), "unreadable"},
		{"zone path", withBody(`{"meta":` + string(metaJSON) + `,"counters":{"../x":"1"}}`), "unreadable"},
		{"counter missing", withBody(`{"meta":` + string(metaJSON) + `,"counters":{"dram":"1"}}`), "unreadable"},
		{"extra counter", withBody(`{"meta":` + string(metaJSON) + `,"counters":{"package":"101000000","dram":"1"}}`), "unreadable"},
		{"bad meta", withBody(`{"meta":{"version":9},"counters":{"package":"1"}}`), "unreadable"},
		{"garbage counter", withBody(`{"meta":` + string(metaJSON) + `,"counters":{"package":"12abc"}}`), "unreadable"},
		{"negative counter", withBody(`{"meta":` + string(metaJSON) + `,"counters":{"package":"-5"}}`), "unreadable"},
		{"backwards", withBody(`{"meta":` + string(metaJSON) + `,"counters":{"package":"50000000"}}`), "backwards"},
		{"absurd rate", withBody(`{"meta":` + string(metaJSON) + `,"counters":{"package":"1000000000000000"}}`), "too_fast"},
	} {
		c.add(time.Second)
		h.set(tc.bytes)
		before := m.Rejected()[tc.reason]
		ss, _ := m.Read(context.Background())
		if got := m.Rejected()[tc.reason]; got != before+1 {
			t.Errorf("%s: rejected[%s] = %d, want %d", tc.name, tc.reason, got, before+1)
		}
		if j := joulesOf(ss); j != 0 {
			t.Errorf("%s: credited %v J", tc.name, j)
		}
	}
	c.add(time.Second)
	h.share(meta, c.now, map[string]float64{"package": 130})
	if j := joulesOf(read(t, m)); j != 30 {
		t.Errorf("after the rejections: %v J, want 30 (130 - 100)", j)
	}
}

func FuzzDecodeFrame(f *testing.F) {
	m := testMeta("package", "dram")
	m.Seq, m.Updated = 1, time.Unix(1000, 0).UTC()
	good, err := EncodeFrame(m, map[string]float64{"package": 1, "dram": 2})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:10])
	f.Add([]byte(FrameMagic + "\x00\x00\x00\x02{}"))
	f.Add([]byte(FrameMagic + "\x00\x00\x00\x1a{\"meta\":1,\"counters\":{}}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(bytes.NewReader(b))
		if err != nil {
			if fr != nil {
				t.Fatal("a frame and an error")
			}
			if !errors.Is(err, ErrFrame) && len(b) > 0 {
				t.Fatalf("bytes %q: error %v does not say the frame is malformed", b, err)
			}
			return
		}
		if len(b) > 8+MaxFrame || len(fr.Meta) == 0 || len(fr.Counters) == 0 || len(fr.Counters) > maxFrameZones {
			t.Fatalf("accepted %q: %d meta bytes, %d counters", b, len(fr.Meta), len(fr.Counters))
		}
		for z := range fr.Counters {
			if !zoneName.MatchString(z) || strings.ContainsAny(z, "/.") {
				t.Fatalf("accepted zone name %q", z)
			}
		}
	})
}

// A host that stops mid-frame costs a read no more than its context's
// deadline: the connection is closed at the deadline, the read fails with
// the deadline, nothing is credited, and the source counts a late reading
// with its reason. The next whole frame is read as usual.
func TestStreamReadEndsAtTheDeadline(t *testing.T) {
	h := newStreamHost(t)
	c := &clock{now: time.Unix(1000, 0)}
	meta := testMeta("package")
	h.share(meta, c.now, map[string]float64{"package": 5})
	m := openStream(t, h, c)
	if _, err := m.Read(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Half a frame, then a connection held open.
	f, err := EncodeFrame(meta, map[string]float64{"package": 9})
	if err != nil {
		t.Fatal(err)
	}
	stalled := make(chan net.Conn, 1)
	l, err := net.Listen("unix", h.path+"-stall")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		_, _ = conn.Write(f[:len(f)/2])
		stalled <- conn
	}()
	t.Cleanup(func() {
		select {
		case conn := <-stalled:
			conn.Close()
		default:
		}
	})
	m.opt.Dial = func(ctx context.Context) (io.ReadCloser, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.path+"-stall")
	}
	const deadline = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	began := time.Now()
	_, err = m.Read(ctx)
	if took := time.Since(began); took > deadline+time.Second {
		t.Errorf("a stalled frame held the read %v, want about %v", took, deadline)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a stalled frame: %v, want the deadline", err)
	}
	hs := m.Health()
	if len(hs) != 1 || hs[0].Up || hs[0].Rejected["late"] != 1 || hs[0].Reason != "read_deadline_exceeded" {
		t.Errorf("health after the stalled frame: %+v, want down, 1 late, read_deadline_exceeded", hs)
	}

	m.opt.Dial = h.dial
	c.add(time.Second)
	h.share(meta, c.now, map[string]float64{"package": 9})
	s, err := m.Read(context.Background())
	if err != nil || len(s) != 1 || s[0].Joules != 4 {
		t.Fatalf("the next whole frame: %+v, %v, want 4 J since the first", s, err)
	}
}
