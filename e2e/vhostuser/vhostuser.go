//go:build e2e

// Package vhostuser is a vhost-user vsock device backend for the
// end-to-end tests: QEMU's vhost-user-vsock-pci device talks to it over a
// Unix socket, and the guest kernel's virtio vsock transport reaches the
// host through it, as with the rust-vmm vhost-device-vsock daemon (which
// cannot be built where only the Go, Debian and npm registries are
// reachable) and with Firecracker's and Cloud Hypervisor's vsock: hybrid
// vsock, where a guest's connection to the host (context id 2) on port P
// is forwarded to the Unix socket <uds>_P.
//
// It is what a test needs on a host without vhost-vsock, and no more:
// stream sockets the guest opens (the host never connects to the guest),
// split virtqueues, no event index, no indirect descriptors, one guest.
// The protocol is the one in QEMU's docs/interop/vhost-user.rst; the
// packets, virtio's vsock device (virtio spec 1.2, 5.10).
package vhostuser

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// vhost-user requests (QEMU docs/interop/vhost-user.rst).
const (
	reqGetFeatures         = 1
	reqSetFeatures         = 2
	reqSetOwner            = 3
	reqResetOwner          = 4
	reqSetMemTable         = 5
	reqSetVringNum         = 8
	reqSetVringAddr        = 9
	reqSetVringBase        = 10
	reqGetVringBase        = 11
	reqSetVringKick        = 12
	reqSetVringCall        = 13
	reqSetVringErr         = 14
	reqGetProtocolFeatures = 15
	reqSetProtocolFeatures = 16
	reqGetQueueNum         = 17
	reqSetVringEnable      = 18
	reqGetConfig           = 24
	reqSetConfig           = 25

	flagVersion   = 0x1
	flagReply     = 0x4
	flagNeedReply = 0x8

	featVersion1       = 1 << 32 // VIRTIO_F_VERSION_1
	featProtocolFeats  = 1 << 30 // VHOST_USER_F_PROTOCOL_FEATURES
	protoFeatConfig    = 1 << 9  // VHOST_USER_PROTOCOL_F_CONFIG
	vringNoFD          = 1 << 8
	descFNext          = 1
	descFWrite         = 2
	descFIndirect      = 4
	hdrSize            = 44 // struct virtio_vsock_hdr
	opRequest          = 1
	opResponse         = 2
	opRst              = 3
	opShutdown         = 4
	opRW               = 5
	opCreditUpdate     = 6
	opCreditRequest    = 7
	typeStream         = 1
	shutdownBoth       = 3
	shutdownSend       = 2
	hostCID            = 2
	bufAlloc           = 256 << 10 // what the host side of each connection can take
	maxPayload         = 4096      // per packet to the guest
	rxQueue, txQueue   = 0, 1
	nQueues            = 2
	maxDescChain       = 64
	maxVhostUserMsg    = 4096
	maxVhostUserFDs    = 8
	udsConnectDeadline = time.Second
)

// Device is one guest's vsock device.
type Device struct {
	// GuestCID is the guest's context id, told to QEMU (GET_CONFIG).
	GuestCID uint64
	// UDS is the base of the host's Unix sockets: a guest connecting to
	// port P reaches UDS_P.
	UDS string
	// Logf, when set, receives what the device does (tests log it).
	Logf func(format string, args ...any)

	mu      sync.Mutex
	regions []region
	queues  [nQueues]vring
	conns   map[connKey]*conn
	pending []packet // to the guest, in order
	stats   Stats
	closers []io.Closer // the listener and QEMU's connection
}

// Stats count what went through the device.
type Stats struct {
	Connects, Refused, ToGuestBytes, FromGuestBytes atomic.Uint64
}

// Stats returns the device's counters.
func (d *Device) Stats() *Stats { return &d.stats }

type region struct {
	gpa, size, uva, off uint64
	mem                 []byte // the region
	mapping             []byte // what mmap returned, for munmap
}

type vring struct {
	num                   uint16
	desc, avail, used     uint64 // QEMU virtual addresses
	lastAvail, usedIdx    uint16
	kick, call            int
	disabled, addrSet     bool
	kickFile              *os.File
	stopKick              chan struct{}
	started               bool
	descMem, avMem, usMem []byte
}

type connKey struct{ guestPort, hostPort uint32 }

type conn struct {
	uds          net.Conn
	peerBufAlloc uint32
	peerFwdCnt   uint32
	txCnt        uint32 // bytes sent to the guest
	fwdCnt       uint32 // bytes from the guest written to the socket
	lastFwdSent  uint32
	closed       bool
}

type packet struct {
	hdr  [hdrSize]byte
	data []byte
	key  connKey // for RW: whose credit it takes
}

func (d *Device) logf(format string, args ...any) {
	if d.Logf != nil {
		d.Logf(format, args...)
	}
}

// Serve listens at path for QEMU (the -chardev socket QEMU connects to)
// and runs the device for the first connection until it ends or l is
// closed. ready is closed once it listens.
func (d *Device) Serve(path string, ready chan<- struct{}) error {
	_ = os.Remove(path)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	defer l.Close()
	d.mu.Lock()
	d.closers = append(d.closers, l)
	d.mu.Unlock()
	close(ready)
	c, err := l.AcceptUnix()
	if err != nil {
		return err
	}
	defer c.Close()
	d.mu.Lock()
	d.closers = append(d.closers, c)
	d.conns = map[connKey]*conn{}
	for i := range d.queues {
		d.queues[i].kick, d.queues[i].call = -1, -1
	}
	d.mu.Unlock()
	defer d.stop()
	return d.control(c)
}

// Close ends Serve: it stops listening, and ends QEMU's connection (the
// guest's device then stops working).
func (d *Device) Close() {
	d.mu.Lock()
	cs := d.closers
	d.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// control handles QEMU's messages until the connection ends.
func (d *Device) control(c *net.UnixConn) error {
	hdr := make([]byte, 12)
	oob := make([]byte, unix.CmsgSpace(4*maxVhostUserFDs))
	for {
		n, oobn, _, _, err := c.ReadMsgUnix(hdr, oob)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if n < len(hdr) {
			if _, err := io.ReadFull(c, hdr[n:]); err != nil {
				return err
			}
		}
		var fds []int
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return err
			}
			for _, m := range msgs {
				if f, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, f...)
				}
			}
		}
		req := binary.LittleEndian.Uint32(hdr[0:])
		flags := binary.LittleEndian.Uint32(hdr[4:])
		size := binary.LittleEndian.Uint32(hdr[8:])
		if size > maxVhostUserMsg {
			return fmt.Errorf("vhost-user request %d: payload of %d bytes", req, size)
		}
		payload := make([]byte, size)
		if _, err := io.ReadFull(c, payload); err != nil {
			return err
		}
		reply, err := d.handle(req, payload, fds)
		if err != nil {
			return fmt.Errorf("vhost-user request %d: %w", req, err)
		}
		if reply == nil && flags&flagNeedReply != 0 {
			reply = u64(0)
		}
		if reply != nil {
			out := make([]byte, 12, 12+len(reply))
			binary.LittleEndian.PutUint32(out[0:], req)
			binary.LittleEndian.PutUint32(out[4:], flagVersion|flagReply)
			binary.LittleEndian.PutUint32(out[8:], uint32(len(reply)))
			if _, err := c.Write(append(out, reply...)); err != nil {
				return err
			}
		}
	}
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func (d *Device) handle(req uint32, p []byte, fds []int) ([]byte, error) {
	need := func(n int) error {
		if len(p) < n {
			closeFDs(fds)
			return fmt.Errorf("payload of %d bytes, want %d", len(p), n)
		}
		return nil
	}
	switch req {
	case reqGetFeatures:
		return u64(featVersion1 | featProtocolFeats), nil
	case reqGetProtocolFeatures:
		return u64(protoFeatConfig), nil
	case reqGetQueueNum:
		return u64(nQueues), nil
	case reqSetFeatures, reqSetProtocolFeatures, reqSetOwner, reqResetOwner, reqSetConfig:
		closeFDs(fds)
		return nil, nil
	case reqGetConfig:
		if err := need(12); err != nil {
			return nil, err
		}
		off, size := binary.LittleEndian.Uint32(p[0:]), binary.LittleEndian.Uint32(p[4:])
		cfg := u64(d.GuestCID)
		out := append([]byte(nil), p[:12]...)
		data := make([]byte, size)
		if int(off) < len(cfg) {
			copy(data, cfg[off:])
		}
		return append(out, data...), nil
	case reqSetMemTable:
		if err := need(8); err != nil {
			return nil, err
		}
		return nil, d.setMemTable(p, fds)
	case reqSetVringNum, reqSetVringBase, reqSetVringEnable, reqGetVringBase:
		if err := need(8); err != nil {
			return nil, err
		}
		return d.vringState(req, p)
	case reqSetVringAddr:
		if err := need(40); err != nil {
			return nil, err
		}
		i := binary.LittleEndian.Uint32(p[0:])
		if i >= nQueues {
			return nil, fmt.Errorf("queue %d", i)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		q := &d.queues[i]
		q.desc, q.used, q.avail = binary.LittleEndian.Uint64(p[8:]), binary.LittleEndian.Uint64(p[16:]), binary.LittleEndian.Uint64(p[24:])
		q.addrSet = true
		return nil, d.mapRingLocked(q)
	case reqSetVringKick, reqSetVringCall, reqSetVringErr:
		if err := need(8); err != nil {
			return nil, err
		}
		return d.vringFD(req, p, fds)
	default:
		closeFDs(fds)
		d.logf("vhost-user: request %d ignored", req)
		return nil, nil
	}
}

// vringState handles the requests that set or get one queue's ring state
// (its size, base index, enablement); p holds at least 8 bytes.
func (d *Device) vringState(req uint32, p []byte) ([]byte, error) {
	i, v := binary.LittleEndian.Uint32(p[0:]), binary.LittleEndian.Uint32(p[4:])
	if i >= nQueues {
		return nil, fmt.Errorf("queue %d", i)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := &d.queues[i]
	switch req {
	case reqSetVringNum:
		q.num = uint16(v)
	case reqSetVringBase:
		q.lastAvail, q.usedIdx = uint16(v), uint16(v)
	case reqSetVringEnable:
		// Rings run from their kick on: QEMU enables them once
		// set up, and disables them to stop.
		q.disabled = v == 0
		d.logf("vhost-user: queue %d enabled=%v", i, v == 1)
		d.processLocked()
	case reqGetVringBase:
		d.stopQueueLocked(q)
		out := binary.LittleEndian.AppendUint32(nil, i)
		return binary.LittleEndian.AppendUint32(out, uint32(q.lastAvail)), nil
	}
	return nil, nil
}

// vringFD handles the requests that hand over one queue's kick, call or
// error eventfd; p holds at least 8 bytes.
func (d *Device) vringFD(req uint32, p []byte, fds []int) ([]byte, error) {
	v := binary.LittleEndian.Uint64(p)
	i := v & 0xff
	fd := -1
	if v&vringNoFD == 0 {
		if len(fds) != 1 {
			closeFDs(fds)
			return nil, fmt.Errorf("want one fd, got %d", len(fds))
		}
		fd = fds[0]
	}
	if i >= nQueues || req == reqSetVringErr {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := &d.queues[i]
	if req == reqSetVringCall {
		if q.call >= 0 {
			unix.Close(q.call)
		}
		q.call = fd
		return nil, nil
	}
	d.stopQueueLocked(q)
	q.kick = fd
	if fd >= 0 {
		d.startKickLocked(int(i), q)
	}
	return nil, nil
}

func (d *Device) setMemTable(p []byte, fds []int) error {
	n := binary.LittleEndian.Uint32(p)
	if int(n) != len(fds) || len(p) < 8+int(n)*32 {
		closeFDs(fds)
		return fmt.Errorf("%d regions, %d fds, %d bytes", n, len(fds), len(p))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.regions {
		_ = unix.Munmap(r.mapping)
	}
	d.regions = nil
	for i := 0; i < int(n); i++ {
		b := p[8+32*i:]
		r := region{gpa: binary.LittleEndian.Uint64(b), size: binary.LittleEndian.Uint64(b[8:]),
			uva: binary.LittleEndian.Uint64(b[16:]), off: binary.LittleEndian.Uint64(b[24:])}
		mem, err := unix.Mmap(fds[i], 0, int(r.off+r.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		unix.Close(fds[i])
		if err != nil {
			return fmt.Errorf("mmap region %d: %w", i, err)
		}
		r.mem, r.mapping = mem[r.off:], mem
		d.regions = append(d.regions, r)
		d.logf("vhost-user: region gpa %#x size %#x uva %#x offset %#x", r.gpa, r.size, r.uva, r.off)
	}
	for i := range d.queues {
		if d.queues[i].addrSet {
			if err := d.mapRingLocked(&d.queues[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// uva and gpa translate QEMU's virtual addresses (the rings) and the
// guest's physical ones (the buffers) into the mapped memory.
func (d *Device) uvaSlice(a, n uint64) []byte {
	for _, r := range d.regions {
		if a >= r.uva && a+n <= r.uva+r.size {
			return r.mem[a-r.uva : a-r.uva+n : a-r.uva+n]
		}
	}
	return nil
}

func (d *Device) gpaSlice(a, n uint64) []byte {
	for _, r := range d.regions {
		if a >= r.gpa && a+n <= r.gpa+r.size {
			return r.mem[a-r.gpa : a-r.gpa+n : a-r.gpa+n]
		}
	}
	return nil
}

func (d *Device) mapRingLocked(q *vring) error {
	if len(d.regions) == 0 || q.num == 0 {
		return nil
	}
	n := uint64(q.num)
	q.descMem, q.avMem, q.usMem = d.uvaSlice(q.desc, 16*n), d.uvaSlice(q.avail, 4+2*n), d.uvaSlice(q.used, 4+8*n)
	if q.descMem == nil || q.avMem == nil || q.usMem == nil {
		return fmt.Errorf("ring addresses %#x %#x %#x outside guest memory", q.desc, q.avail, q.used)
	}
	return nil
}

func (d *Device) startKickLocked(i int, q *vring) {
	if err := unix.SetNonblock(q.kick, true); err != nil {
		d.logf("vhost-user: kick fd: %v", err)
	}
	f := os.NewFile(uintptr(q.kick), "kick"+strconv.Itoa(i))
	stop := make(chan struct{})
	q.kickFile, q.stopKick, q.started = f, stop, true
	go func() {
		buf := make([]byte, 8)
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
			d.mu.Lock()
			d.processLocked()
			d.mu.Unlock()
		}
	}()
}

func (d *Device) stopQueueLocked(q *vring) {
	if q.started {
		close(q.stopKick)
		q.kickFile.Close() // closes q.kick
		q.started, q.kick = false, -1
	}
}

// stop ends every connection and the kick readers, and unmaps memory.
func (d *Device) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.queues {
		q := &d.queues[i]
		d.stopQueueLocked(q)
		if q.call >= 0 {
			unix.Close(q.call)
			q.call = -1
		}
		q.descMem, q.avMem, q.usMem = nil, nil, nil
	}
	for k, c := range d.conns {
		c.closed = true
		c.uds.Close()
		delete(d.conns, k)
	}
	for _, r := range d.regions {
		_ = unix.Munmap(r.mapping)
	}
	d.regions = nil
}

// ring access: avail.idx and used.idx are read and written as the 32-bit
// words that hold them with their flags, atomically.
func (q *vring) availIdx() uint16 {
	return uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(&q.avMem[0]))) >> 16)
}

func (q *vring) availRing(i uint16) uint16 {
	return binary.LittleEndian.Uint16(q.avMem[4+2*uint64(i%q.num):])
}

func (q *vring) pushUsed(id uint16, n uint32) {
	e := q.usMem[4+8*uint64(q.usedIdx%q.num):]
	binary.LittleEndian.PutUint32(e, uint32(id))
	binary.LittleEndian.PutUint32(e[4:], n)
	q.usedIdx++
	w := (*uint32)(unsafe.Pointer(&q.usMem[0]))
	atomic.StoreUint32(w, atomic.LoadUint32(w)&0xffff|uint32(q.usedIdx)<<16)
}

func (d *Device) notify(q *vring) {
	if q.call >= 0 {
		_, _ = unix.Write(q.call, u64(1))
	}
}

func (q *vring) ready() bool {
	return !q.disabled && q.descMem != nil && q.started
}

// chain is one descriptor chain: the guest's readable buffers, then its
// writable ones.
type chain struct {
	head     uint16
	readable [][]byte
	writable [][]byte
}

func (d *Device) popChain(q *vring) (*chain, bool, error) {
	if q.lastAvail == q.availIdx() {
		return nil, false, nil
	}
	head := q.availRing(q.lastAvail)
	q.lastAvail++
	c := &chain{head: head}
	i := head
	for n := 0; ; n++ {
		if i >= q.num || n >= maxDescChain {
			return nil, true, fmt.Errorf("descriptor chain from %d: index %d, length %d", head, i, n)
		}
		e := q.descMem[16*uint64(i):]
		addr, ln := binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint32(e[8:])
		flags, next := binary.LittleEndian.Uint16(e[12:]), binary.LittleEndian.Uint16(e[14:])
		if flags&descFIndirect != 0 {
			return nil, true, errors.New("indirect descriptor (not offered)")
		}
		b := d.gpaSlice(addr, uint64(ln))
		if b == nil {
			return nil, true, fmt.Errorf("buffer %#x+%d outside guest memory", addr, ln)
		}
		if flags&descFWrite != 0 {
			c.writable = append(c.writable, b)
		} else {
			c.readable = append(c.readable, b)
		}
		if flags&descFNext == 0 {
			return c, true, nil
		}
		i = next
	}
}

// processLocked takes the guest's packets from the tx queue and gives it
// what is pending on the rx queue.
func (d *Device) processLocked() {
	tx, rx := &d.queues[txQueue], &d.queues[rxQueue]
	if tx.ready() {
		used := false
		for {
			c, ok, err := d.popChain(tx)
			if err != nil {
				d.logf("vhost-user tx: %v", err)
			}
			if !ok {
				break
			}
			if c != nil {
				var pkt []byte
				for _, b := range c.readable {
					pkt = append(pkt, b...)
				}
				d.fromGuestLocked(pkt)
				tx.pushUsed(c.head, 0)
			}
			used = true
		}
		if used {
			d.notify(tx)
		}
	}
	if rx.ready() {
		used := false
		for len(d.pending) > 0 {
			p := d.pending[0]
			if p.key != (connKey{}) && len(p.data) > 0 {
				c := d.conns[p.key]
				if c == nil {
					d.pending = d.pending[1:]
					continue
				}
				if credit := c.peerBufAlloc - (c.txCnt - c.peerFwdCnt); credit < uint32(len(p.data)) {
					break // the guest has no room: it sends a credit update when it has
				}
			}
			ch, ok, err := d.popChain(rx)
			if err != nil {
				d.logf("vhost-user rx: %v", err)
				if ch == nil && ok {
					continue
				}
			}
			if !ok {
				break
			}
			d.pending = d.pending[1:]
			if p.key != (connKey{}) && len(p.data) > 0 {
				c := d.conns[p.key]
				c.txCnt += uint32(len(p.data))
			}
			if p.key != (connKey{}) {
				if c := d.conns[p.key]; c != nil {
					binary.LittleEndian.PutUint32(p.hdr[40:], c.fwdCnt)
					c.lastFwdSent = c.fwdCnt
				}
			}
			n := scatter(ch.writable, p.hdr[:], p.data)
			rx.pushUsed(ch.head, uint32(n))
			d.stats.ToGuestBytes.Add(uint64(len(p.data)))
			used = true
		}
		if used {
			d.notify(rx)
		}
	}
}

// scatter writes the header and data across the writable buffers.
func scatter(bufs [][]byte, parts ...[]byte) int {
	n := 0
	bi, off := 0, 0
	for _, p := range parts {
		for len(p) > 0 && bi < len(bufs) {
			k := copy(bufs[bi][off:], p)
			p, off, n = p[k:], off+k, n+k
			if off == len(bufs[bi]) {
				bi, off = bi+1, 0
			}
		}
	}
	return n
}

func (d *Device) header(op uint16, k connKey, n int, flags uint32) [hdrSize]byte {
	var h [hdrSize]byte
	binary.LittleEndian.PutUint64(h[0:], hostCID)
	binary.LittleEndian.PutUint64(h[8:], d.GuestCID)
	binary.LittleEndian.PutUint32(h[16:], k.hostPort)
	binary.LittleEndian.PutUint32(h[20:], k.guestPort)
	binary.LittleEndian.PutUint32(h[24:], uint32(n))
	binary.LittleEndian.PutUint16(h[28:], typeStream)
	binary.LittleEndian.PutUint16(h[30:], op)
	binary.LittleEndian.PutUint32(h[32:], flags)
	binary.LittleEndian.PutUint32(h[36:], bufAlloc)
	return h
}

func (d *Device) sendLocked(op uint16, k connKey, data []byte, flags uint32) {
	d.pending = append(d.pending, packet{hdr: d.header(op, k, len(data), flags), data: data, key: k})
}

// rstLocked answers a packet of no connection (or a refused one) with a
// reset; the key is not a connection's, so it takes no credit.
func (d *Device) rstLocked(k connKey) {
	h := d.header(opRst, k, 0, 0)
	d.pending = append(d.pending, packet{hdr: h})
}

// fromGuestLocked handles one packet the guest sent.
func (d *Device) fromGuestLocked(b []byte) {
	if len(b) < hdrSize {
		d.logf("vsock: short packet of %d bytes", len(b))
		return
	}
	src, dst := binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])
	k := connKey{guestPort: binary.LittleEndian.Uint32(b[16:]), hostPort: binary.LittleEndian.Uint32(b[20:])}
	ln := binary.LittleEndian.Uint32(b[24:])
	typ, op := binary.LittleEndian.Uint16(b[28:]), binary.LittleEndian.Uint16(b[30:])
	flags := binary.LittleEndian.Uint32(b[32:])
	peerBuf, peerFwd := binary.LittleEndian.Uint32(b[36:]), binary.LittleEndian.Uint32(b[40:])
	data := b[hdrSize:]
	if int(ln) < len(data) {
		data = data[:ln]
	}
	if src != d.GuestCID || dst != hostCID || typ != typeStream {
		d.logf("vsock: packet %d->%d type %d op %d dropped", src, dst, typ, op)
		if op != opRst {
			d.rstLocked(k)
		}
		return
	}
	c := d.conns[k]
	if c != nil {
		c.peerBufAlloc, c.peerFwdCnt = peerBuf, peerFwd
	}
	switch op {
	case opRequest:
		if c != nil {
			d.rstLocked(k)
			return
		}
		path := d.UDS + "_" + strconv.FormatUint(uint64(k.hostPort), 10)
		u, err := net.DialTimeout("unix", path, udsConnectDeadline)
		if err != nil {
			d.stats.Refused.Add(1)
			d.logf("vsock: guest port %d -> host port %d: %v", k.guestPort, k.hostPort, err)
			d.rstLocked(k)
			return
		}
		d.stats.Connects.Add(1)
		c = &conn{uds: u, peerBufAlloc: peerBuf, peerFwdCnt: peerFwd}
		d.conns[k] = c
		d.sendLocked(opResponse, k, nil, 0)
		go d.fromHost(k, c)
	case opRW:
		if c == nil {
			d.rstLocked(k)
			return
		}
		d.stats.FromGuestBytes.Add(uint64(len(data)))
		_ = c.uds.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.uds.Write(data); err != nil {
			d.logf("vsock: to host port %d: %v", k.hostPort, err)
		}
		c.fwdCnt += uint32(len(data))
		if c.fwdCnt-c.lastFwdSent > bufAlloc/2 {
			d.sendLocked(opCreditUpdate, k, nil, 0)
		}
	case opCreditRequest:
		if c != nil {
			d.sendLocked(opCreditUpdate, k, nil, 0)
		}
	case opCreditUpdate:
	case opShutdown:
		if c == nil {
			d.rstLocked(k)
			return
		}
		if flags&shutdownSend != 0 {
			if u, ok := c.uds.(*net.UnixConn); ok {
				_ = u.CloseWrite()
			}
		}
		if flags&shutdownBoth == shutdownBoth {
			d.closeLocked(k, c)
			d.rstLocked(k)
		}
	case opRst:
		if c != nil {
			d.closeLocked(k, c)
		}
	case opResponse:
		d.rstLocked(k) // the host never connects to the guest
	}
}

func (d *Device) closeLocked(k connKey, c *conn) {
	c.closed = true
	c.uds.Close()
	delete(d.conns, k)
}

// fromHost forwards what the host's socket sends to the guest, then the
// host's end of the stream.
func (d *Device) fromHost(k connKey, c *conn) {
	buf := make([]byte, maxPayload)
	for {
		n, err := c.uds.Read(buf)
		d.mu.Lock()
		if c.closed {
			d.mu.Unlock()
			return
		}
		if n > 0 {
			d.sendLocked(opRW, k, append([]byte(nil), buf[:n]...), 0)
		}
		if err != nil {
			d.sendLocked(opShutdown, k, nil, shutdownBoth)
		}
		d.processLocked()
		d.mu.Unlock()
		if err != nil {
			return
		}
	}
}
