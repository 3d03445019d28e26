//go:build linux

package cgroupstats

import (
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readPath reads the file named by path, which must end in a NUL byte, into
// buf (grown as needed) and returns the contents and the buffer. It calls
// openat directly because os.Open and unix.Open copy the name and allocate
// an *os.File per call, which a reader opening a dozen files per workload
// per interval would pay on every Read.
//
// With oneRecord, a read that returns less than the buffer holds ends the
// file, saving the read that would return 0 (one syscall of four per
// file). That holds for a regular file and for a cgroup or sysfs file
// that the kernel writes as one record (every cgroup file this package
// reads but the pid lists, tasks and cgroup.threads): seq_file grows its
// buffer until the record fits and copies as much of it as the read asks
// for, so a short read was the whole record. A list of one record per
// pid is returned a page at a time, short reads before its end.
func readPath(path, buf []byte, oneRecord bool) ([]byte, []byte, error) {
	var fd int
	cwd := unix.AT_FDCWD // a variable: the constant -100 cannot convert to uintptr
	for {
		r, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(&path[0])),
			uintptr(unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return nil, buf, e
		}
		fd = int(r)
		break
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			buf = slices.Grow(buf, len(buf)+4096)
			buf = buf[:cap(buf)]
		}
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, buf, err
		}
		if m == 0 {
			return buf[:n], buf, nil
		}
		n += m
		if oneRecord && n < len(buf) {
			return buf[:n], buf, nil
		}
	}
}
