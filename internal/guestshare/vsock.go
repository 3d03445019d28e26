package guestshare

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/mdlayher/vsock"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The share over vsock, for hosts that cannot share a directory with a
// guest (docs/vm.md): on each connection the host writes the domain's
// latest share as one frame (hostshare.EncodeFrame: the metadata and the
// counters the directory holds) and closes it. It reads nothing from the
// guest: which domain's share a connection gets follows from the
// connection alone.
//
//   - Hybrid vsock (vhost-user-vsock backends, Firecracker, Cloud
//     Hypervisor): the VMM forwards a guest's connection to the host's
//     port P to the Unix socket <uds-path>_P. Each domain gets its own,
//     <domain's directory>/vsock_P, so the domain's uds-path is
//     <domain's directory>/vsock: a connection on it is that domain's.
//   - vhost-vsock (the kernel's, /dev/vhost-vsock): one AF_VSOCK listener
//     on port P; the connection's peer context id, which the host kernel
//     sets, names the domain (libvirt's <vsock><cid address='N'/>).

// VsockSocket is the name of a domain's hybrid-vsock socket for port,
// in the domain's directory.
func VsockSocket(port uint32) string { return "vsock_" + strconv.FormatUint(uint64(port), 10) }

// vhostVsockDev is the kernel's vhost-vsock device: a host whose guests
// reach it over AF_VSOCK has it.
var vhostVsockDev = "/dev/vhost-vsock"

// maxUnixPath is the longest path a Unix socket can be bound at
// (sun_path holds 108 bytes with the terminating NUL).
const maxUnixPath = 107

// serveTimeout bounds writing one frame: it fits a socket's buffer, so
// only a connection gone wrong takes longer.
const serveTimeout = 2 * time.Second

// CIDFunc names the running domain whose vsock context id is cid.
type CIDFunc func(cid uint32) (uuid, name string, ok bool)

// server serves the shares over vsock; the writer publishes each
// domain's frame to it.
type server struct {
	port     uint32
	sockMode os.FileMode
	gid      int
	cids     CIDFunc
	log      *zap.Logger

	mu      sync.Mutex
	frames  map[string][]byte // by directory name (DirName)
	hybrid  map[string]net.Listener
	failed  map[string]bool // hybrid sockets that could not be made (logged once)
	refused map[uint32]time.Time
	vsockL  net.Listener
	closed  bool
	wg      sync.WaitGroup
}

func newServer(port uint32, sockMode os.FileMode, gid int, cids CIDFunc, log *zap.Logger) *server {
	return &server{port: port, sockMode: sockMode, gid: gid, cids: cids, log: log,
		frames: map[string][]byte{}, hybrid: map[string]net.Listener{}, failed: map[string]bool{}, refused: map[uint32]time.Time{}}
}

// listenVsock starts the AF_VSOCK listener on a host with vhost-vsock;
// elsewhere (no such guests, or this machine is itself a guest, whose
// port would face its own hypervisor) only the hybrid sockets serve.
func (s *server) listenVsock() error {
	if s.cids == nil {
		return nil
	}
	if _, err := os.Stat(vhostVsockDev); err != nil {
		s.log.Info("no vhost-vsock on this host: the shares are served on hybrid-vsock sockets only",
			zap.String("device", vhostVsockDev), zap.Uint32("port", s.port))
		return nil
	}
	l, err := vsock.ListenContextID(unix.VMADDR_CID_ANY, s.port, nil)
	if err != nil {
		return fmt.Errorf("vsock port %d: %w", s.port, err)
	}
	s.mu.Lock()
	s.vsockL = l
	s.mu.Unlock()
	s.log.Info("serving the guests' shares over vsock", zap.Uint32("port", s.port))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.accept(l, s.byCID)
	}()
	return nil
}

// byCID is the share of the domain whose context id the connection comes
// from (the host kernel sets it: a guest cannot claim another's).
func (s *server) byCID(c net.Conn) (string, []byte) {
	a, ok := c.RemoteAddr().(*vsock.Addr)
	if !ok {
		return "", nil
	}
	uuid, name, ok := s.cids(a.ContextID)
	if !ok {
		s.refuse(a.ContextID, "no running domain has this context id")
		return "", nil
	}
	key := DirName(uuid, name)
	s.mu.Lock()
	f := s.frames[key]
	s.mu.Unlock()
	if f == nil {
		s.refuse(a.ContextID, "the domain has no share yet")
	}
	return key, f
}

// refuse logs a connection that gets nothing, once a minute per context id.
func (s *server) refuse(cid uint32, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.refused[cid]) < time.Minute {
		return
	}
	if len(s.refused) > 1024 {
		clear(s.refused)
	}
	s.refused[cid] = time.Now()
	s.log.Info("vsock connection gets no share", zap.Uint32("cid", cid), zap.String("why", why))
}

// publish makes frame the domain's share, and opens its hybrid socket in
// dir (the domain's directory) when it has none yet.
func (s *server) publish(key, dir string, frame []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.frames[key] = frame
	if s.hybrid[key] != nil || s.failed[key] {
		return
	}
	l, err := s.listenUnix(filepath.Join(dir, VsockSocket(s.port)))
	if err != nil {
		s.failed[key] = true
		s.log.Warn("guest share: no hybrid-vsock socket for the domain", zap.String("dir", dir), zap.Error(err))
		return
	}
	s.hybrid[key] = l
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.accept(l, func(net.Conn) (string, []byte) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return key, s.frames[key]
		})
	}()
}

// listenUnix binds a domain's socket: a socket left there by an exporter
// that died is replaced (this one holds the root's lock, so no other
// serves it); anything else at that path is not ours to remove.
func (s *server) listenUnix(path string) (net.Listener, error) {
	if len(path) > maxUnixPath {
		return nil, fmt.Errorf("socket path %s is %d bytes, more than a Unix socket allows (%d): shorten guests.share.path", path, len(path), maxUnixPath)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	l.(*net.UnixListener).SetUnlinkOnClose(true)
	err = os.Chmod(path, s.sockMode)
	if err == nil && s.gid >= 0 {
		err = os.Chown(path, -1, s.gid)
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// maxInFlight bounds the connections a listener serves at once; more
// are closed unanswered, so a guest that opens many cannot make the host
// hold many.
const maxInFlight = 16

// accept serves each connection with the share share() names for it.
func (s *server) accept(l net.Listener, share func(net.Conn) (string, []byte)) {
	slots := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if !s.isClosed() {
				s.log.Warn("guest share: accept", zap.String("listener", l.Addr().String()), zap.Error(err))
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			s.serve(c, share)
		}()
	}
}

// serve writes the connection's share, or nothing, and closes it. What
// the guest sends is never looked at: it has no say in what it gets. It
// is read and dropped after the frame, until the guest closes (at most
// serveTimeout), because closing a socket with unread bytes resets the
// connection, and the guest would lose the frame.
func (s *server) serve(c net.Conn, share func(net.Conn) (string, []byte)) {
	defer c.Close()
	_, f := share(c)
	if f == nil {
		return
	}
	_ = c.SetDeadline(time.Now().Add(serveTimeout))
	if _, err := c.Write(f); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_, _ = io.CopyN(io.Discard, c, 1<<16)
	}
}

func (s *server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// close stops every listener (removing the hybrid sockets: a guest then
// reads nothing, as from a host without wattrace) and waits for them.
func (s *server) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	ls := make([]net.Listener, 0, len(s.hybrid)+1)
	for _, l := range s.hybrid {
		ls = append(ls, l)
	}
	if s.vsockL != nil {
		ls = append(ls, s.vsockL)
	}
	s.mu.Unlock()
	for _, l := range ls {
		_ = l.Close()
	}
	s.wg.Wait()
}
