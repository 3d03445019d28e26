package power

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// perfFD is an open perf event read with read(2): 8 bytes, the count.
type perfFD int

func openPerfCounter(ev PerfEvent, cpu int) (PerfCounter, error) {
	attr := unix.PerfEventAttr{
		Type:   ev.Type,
		Config: ev.Config,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return perfFD(fd), nil
}

func (f perfFD) Count() (uint64, error) {
	var b [8]byte
	n, err := unix.Read(int(f), b[:])
	if err != nil {
		return 0, err
	}
	if n != 8 {
		return 0, fmt.Errorf("short perf read: %d bytes", n)
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

func (f perfFD) Close() error { return unix.Close(int(f)) }
