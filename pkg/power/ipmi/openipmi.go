package ipmi

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DevicePaths are where udev and older setups put the OpenIPMI device.
var DevicePaths = []string{"/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0"}

// Kernel ABI (include/uapi/linux/ipmi.h). The Go structs mirror the C
// layout, padding included, on every Linux architecture.
const (
	systemInterfaceAddrType = 0x0c // IPMI_SYSTEM_INTERFACE_ADDR_TYPE
	bmcChannel              = 0x0f // IPMI_BMC_CHANNEL
	responseRecvType        = 1    // IPMI_RESPONSE_RECV_TYPE
	maxMsgLen               = 272  // IPMI_MAX_MSG_LENGTH
)

// struct ipmi_system_interface_addr
type systemInterfaceAddr struct {
	addrType int32
	channel  int16
	lun      uint8
	_        uint8
}

// struct ipmi_msg
type ipmiMsg struct {
	netfn   uint8
	cmd     uint8
	dataLen uint16
	data    *byte
}

// struct ipmi_req
type ipmiReq struct {
	addr    *byte
	addrLen uint32
	msgid   int // C long: Go int has its size on every Linux target
	msg     ipmiMsg
}

// struct ipmi_recv
type ipmiRecv struct {
	recvType int32
	addr     *byte
	addrLen  uint32
	msgid    int
	msg      ipmiMsg
}

// _IOC(dir, 'i', nr, size) as the kernel's asm-generic ioctl.h builds it.
func ioc(dir, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | uintptr('i')<<8 | nr
}

var (
	// IPMICTL_SEND_COMMAND = _IOR('i', 13, struct ipmi_req)
	ioctlSendCommand = ioc(2, 13, unsafe.Sizeof(ipmiReq{}))
	// IPMICTL_RECEIVE_MSG_TRUNC = _IOWR('i', 11, struct ipmi_recv)
	ioctlReceiveMsgTrunc = ioc(3, 11, unsafe.Sizeof(ipmiRecv{}))
)

// sys is the device access the request/response flow needs; tests replace
// it with a recorded BMC.
type sys interface {
	ioctl(fd int, req uintptr, arg unsafe.Pointer) error
	// pollIn waits until fd is readable or timeout passes (false).
	pollIn(fd int, timeout time.Duration) (bool, error)
	close(fd int) error
}

type unixSys struct{}

func (unixSys) ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

func (unixSys) pollIn(fd int, timeout time.Duration) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(timeout/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return n > 0, err
	}
}

func (unixSys) close(fd int) error { return unix.Close(fd) }

// Device is an open OpenIPMI character device. Requests are serialised:
// the BMC answers one at a time anyway.
type Device struct {
	path string
	fd   int
	sys  sys

	mu    sync.Mutex
	msgid int
}

// Open opens the first OpenIPMI device that exists among paths
// (DevicePaths when empty). It needs read-write access: root, or a udev
// rule granting a group.
func Open(paths ...string) (*Device, error) {
	if len(paths) == 0 {
		paths = DevicePaths
	}
	var errs []error
	for _, p := range paths {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			return &Device{path: p, fd: fd, sys: unixSys{}}, nil
		}
		errs = append(errs, fmt.Errorf("open %s: %w", p, err))
	}
	return nil, fmt.Errorf("no OpenIPMI device (load ipmi_devintf and ipmi_si): %w", errors.Join(errs...))
}

// Path is the device file in use.
func (d *Device) Path() string { return d.path }

// Close closes the device.
func (d *Device) Close() error { return d.sys.close(d.fd) }

// Do sends req to the BMC over the system interface and returns the
// response data, completion code first. Responses to other message ids
// (late answers to requests that timed out) are discarded.
func (d *Device) Do(ctx context.Context, req Request) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.msgid++
	id := d.msgid

	addr := systemInterfaceAddr{addrType: systemInterfaceAddrType, channel: bmcChannel}
	data := append([]byte(nil), req.Data...)
	if len(data) == 0 {
		data = []byte{0} // a valid pointer; data_len says 0
	}
	r := ipmiReq{
		addr:    (*byte)(unsafe.Pointer(&addr)),
		addrLen: uint32(unsafe.Sizeof(addr)),
		msgid:   id,
		msg:     ipmiMsg{netfn: req.NetFn, cmd: req.Cmd, dataLen: uint16(len(req.Data)), data: &data[0]},
	}
	// The kernel follows the pointers inside r: pin what they point to.
	var pin runtime.Pinner
	pin.Pin(&addr)
	pin.Pin(&data[0])
	err := d.sys.ioctl(d.fd, ioctlSendCommand, unsafe.Pointer(&r))
	pin.Unpin()
	if err != nil {
		return nil, fmt.Errorf("%s: IPMICTL_SEND_COMMAND netfn 0x%02X cmd 0x%02X: %w", d.path, req.NetFn, req.Cmd, err)
	}

	for {
		wait := 5 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			wait = time.Until(dl)
		}
		if wait <= 0 {
			return nil, fmt.Errorf("%s: waiting for response: %w", d.path, context.DeadlineExceeded)
		}
		ready, err := d.sys.pollIn(d.fd, wait)
		if err != nil {
			return nil, fmt.Errorf("%s: poll: %w", d.path, err)
		}
		if !ready {
			return nil, fmt.Errorf("%s: no response to netfn 0x%02X cmd 0x%02X within %v", d.path, req.NetFn, req.Cmd, wait.Round(time.Millisecond))
		}
		resp, gotID, ok, err := d.receive()
		if err != nil {
			return nil, err
		}
		if !ok || gotID != id {
			continue // an event or a stale response
		}
		return resp, nil
	}
}

// receive reads one message; ok is false for anything but a response.
func (d *Device) receive() ([]byte, int, bool, error) {
	var addr systemInterfaceAddr
	buf := make([]byte, maxMsgLen)
	rv := ipmiRecv{
		addr:    (*byte)(unsafe.Pointer(&addr)),
		addrLen: uint32(unsafe.Sizeof(addr)),
		msg:     ipmiMsg{dataLen: uint16(len(buf)), data: &buf[0]},
	}
	var pin runtime.Pinner
	pin.Pin(&addr)
	pin.Pin(&buf[0])
	err := d.sys.ioctl(d.fd, ioctlReceiveMsgTrunc, unsafe.Pointer(&rv))
	pin.Unpin()
	// EMSGSIZE from the _TRUNC variant means the data was cut to our
	// buffer, which already holds the longest IPMI message.
	if err != nil && !errors.Is(err, unix.EMSGSIZE) {
		return nil, 0, false, fmt.Errorf("%s: IPMICTL_RECEIVE_MSG_TRUNC: %w", d.path, err)
	}
	if rv.recvType != responseRecvType {
		return nil, 0, false, nil
	}
	n := int(rv.msg.dataLen)
	if n > len(buf) {
		n = len(buf)
	}
	return append([]byte(nil), buf[:n]...), rv.msgid, true, nil
}
