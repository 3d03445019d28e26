package bpfloader

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// probeChildEnv makes the test binary do one piece of file or network IO
// and exit, so that the probes' figures for its (unique) tgid and cgroup
// are what that IO alone did. Handled in init, before any test runs.
const probeChildEnv = "WATTRACE_TEST_PROBE_CHILD"

func init() {
	spec := os.Getenv(probeChildEnv)
	if spec == "" {
		return
	}
	if err := probeChild(strings.Fields(spec)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(0)
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// probeChildModes are the children's pieces of IO by mode, each given
// the arguments after the mode.
var probeChildModes = map[string]func(args []string) error{
	"read":    childRead,
	"write":   childWrite,
	"direct":  childDirect,
	"tcprecv": childTCPRecv,
	"tcpsend": childTCPSend,
	"udprecv": childUDPRecv,
	"udpsend": childUDPSend,
}

func probeChild(args []string) error {
	run, ok := probeChildModes[args[0]]
	if !ok {
		return fmt.Errorf("unknown child mode %q", args[0])
	}
	return run(args[1:])
}

// childRead: read PATH TIMES BUFSIZE: read the whole file TIMES times,
// BUFSIZE bytes at a time.
func childRead(args []string) error {
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	buf := make([]byte, atoi(args[2]))
	for i := 0; i < atoi(args[1]); i++ {
		if err := readWhole(f, buf); err != nil {
			return err
		}
	}
	return f.Close()
}

// readWhole reads f from its start to its end, len(buf) bytes at a time.
func readWhole(f *os.File, buf []byte) error {
	for off := int64(0); ; {
		n, err := f.ReadAt(buf, off)
		off += int64(n)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// childWrite: write PATH PAGES: a new file of PAGES pages in 1 MiB writes.
func childWrite(args []string) error {
	f, err := os.OpenFile(args[0], os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for left := atoi(args[1]) * os.Getpagesize(); left > 0; left -= len(buf) {
		if _, err := f.Write(buf[:min(left, len(buf))]); err != nil {
			return err
		}
	}
	return f.Close()
}

// childDirect: direct PATH BYTES: O_DIRECT writes of 1 MiB from an aligned
// buffer.
func childDirect(args []string) error {
	fd, err := unix.Open(args[0], unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY|unix.O_DIRECT, 0o600)
	if err != nil {
		return err
	}
	buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return err
	}
	for left := atoi(args[1]); left > 0; left -= len(buf) {
		if _, err := unix.Write(fd, buf[:min(left, len(buf))]); err != nil {
			return err
		}
	}
	return unix.Close(fd)
}

// childTCPRecv: tcprecv: print the port, take one connection, read it to
// EOF, print the bytes.
func childTCPRecv([]string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	c, err := l.Accept()
	if err != nil {
		return err
	}
	n, err := io.CopyBuffer(io.Discard, c, make([]byte, 64<<10))
	fmt.Println(n)
	return err
}

// childTCPSend: tcpsend PORT BYTES.
func childTCPSend(args []string) error {
	c, err := net.Dial("tcp", "127.0.0.1:"+args[0])
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for left := atoi(args[1]); left > 0; left -= len(buf) {
		if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
			return err
		}
	}
	return c.Close()
}

// childUDPRecv: udprecv: print the port, read datagrams until 1 s of
// silence, print the bytes.
func childUDPRecv([]string) error {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	_ = c.(*net.UDPConn).SetReadBuffer(8 << 20)
	fmt.Println(c.LocalAddr().(*net.UDPAddr).Port)
	buf := make([]byte, 64<<10)
	total, started := 0, false
	for {
		wait := 10 * time.Second // until the sender starts
		if started {
			wait = time.Second
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			break
		}
		total += n
		started = true
	}
	fmt.Println(total)
	return nil
}

// childUDPSend: udpsend PORT COUNT SIZE.
func childUDPSend(args []string) error {
	c, err := net.Dial("udp", "127.0.0.1:"+args[0])
	if err != nil {
		return err
	}
	buf := make([]byte, atoi(args[2]))
	for i := 0; i < atoi(args[1]); i++ {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		if i%64 == 63 { // let the receiver keep up: loopback UDP drops on a full buffer
			time.Sleep(time.Millisecond)
		}
	}
	return c.Close()
}
