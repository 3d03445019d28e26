package hostshare

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/mdlayher/socket"
	"golang.org/x/sys/unix"
)

// HostCID is the context id a guest reaches its host at over vsock
// (VMADDR_CID_HOST), with vhost-vsock and with the hybrid vsock of
// vhost-user backends, Firecracker and Cloud Hypervisor alike.
const HostCID = unix.VMADDR_CID_HOST

// MaxVsockPort is the highest vsock port a setting may name
// (VMADDR_PORT_ANY, one more, means any).
const MaxVsockPort = unix.VMADDR_PORT_ANY - 1

// VsockDialer returns Options.Dial for the share on the host's vsock
// port: each call connects (AF_VSOCK, context id HostCID), bounded by
// timeout and by ctx's deadline, whichever is sooner, for the connection
// and the frame alike, so a host that does not answer costs a read at
// most that long.
func VsockDialer(port uint32, timeout time.Duration) func(context.Context) (io.ReadCloser, error) {
	return func(ctx context.Context) (io.ReadCloser, error) {
		c, err := socket.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0, "vsock", nil)
		if err != nil {
			return nil, fmt.Errorf("vsock: %w", err)
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if _, err := c.Connect(ctx, &unix.SockaddrVM{CID: HostCID, Port: port}); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("vsock connect %d:%d: %w", HostCID, port, err)
		}
		deadline, _ := ctx.Deadline()
		if err := c.SetDeadline(deadline); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("vsock %d:%d: %w", HostCID, port, err)
		}
		return c, nil
	}
}

// VsockWhere names a share read over vsock port in logs and rejections.
func VsockWhere(port uint32) string { return fmt.Sprintf("vsock:%d:%d", HostCID, port) }
