package bpfloader

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

// foldChildEnv makes the test binary send TCP payload in two phases, each
// started by a line on stdin, so that a test can read the probes or move
// the process between phases.
const foldChildEnv = "WATTRACE_TEST_FOLD_CHILD"

func init() {
	spec := os.Getenv(foldChildEnv)
	if spec == "" {
		return
	}
	if err := foldChild(strings.Fields(spec)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(0)
}

// foldChild: PORT BYTES1 BYTES2. Connects, and for each phase waits for a
// line on stdin, sends its bytes and prints the phase; then waits for a
// last line and exits.
func foldChild(args []string) error {
	c, err := net.Dial("tcp", "127.0.0.1:"+args[0])
	if err != nil {
		return err
	}
	in := bufio.NewReader(os.Stdin)
	buf := make([]byte, 64<<10)
	for phase, n := range args[1:] {
		if _, err := in.ReadString('\n'); err != nil {
			return err
		}
		for left := atoi(n); left > 0; left -= len(buf) {
			if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
				return err
			}
		}
		fmt.Println(phase + 1)
	}
	if _, err := in.ReadString('\n'); err != nil {
		return err
	}
	return c.Close()
}

// What a live task counted reaches the maps at the next read (the fold
// iterator); what it counted in a cgroup stays with that cgroup when it
// moves before any read (the move folds first); nothing is counted twice
// when it exits (the exit and free folds take only the rest). The same with
// the probes loaded against the accounting, whose task iterator folds them
// when it is read before the probes, as the stats loop does.
func TestProbeFoldLiveMoveExit(t *testing.T) {
	t.Run("probes alone", func(t *testing.T) {
		p, h := loadProbesForTest(t, ProbeOptions{Disable: []string{reading.ProbeCounters}})
		probeFoldLiveMoveExit(t, h, func() reading.ProbeReading { return readProbes(t, p) })
	})
	t.Run("folded by the accounting", func(t *testing.T) {
		a, _, _ := loadForTest(t)
		p, h := loadProbesForTest(t, ProbeOptions{Disable: []string{reading.ProbeCounters}, Accounting: a})
		st, err := EnableStats()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		own := foldRuns(t, p)
		probeFoldLiveMoveExit(t, h, func() reading.ProbeReading {
			if _, err := a.Read(); err != nil {
				t.Fatal(err)
			}
			return readProbes(t, p)
		})
		if n := foldRuns(t, p) - own; n != 0 {
			t.Errorf("the probes' own fold iterator ran %d times after reads of the accounting, want 0", n)
		}
	})
}

// foldRuns is how many times the probes' own fold iterator has run.
func foldRuns(t *testing.T, p *Probes) uint64 {
	t.Helper()
	s, err := p.progs[foldIterProg].Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s.RunCount
}

func probeFoldLiveMoveExit(t *testing.T, h cgroup.Hierarchy, read func() reading.ProbeReading) {
	dirA, dirB := testenv.Cgroup(t, h.Mount, "folda"), testenv.Cgroup(t, h.Mount, "foldb")
	dirR := testenv.Cgroup(t, h.Mount, "foldr")
	idA, idB, idR := testenv.Inode(t, dirA), testenv.Inode(t, dirB), testenv.Inode(t, dirR)
	const n1, n2 = 3<<20 + 123, 5<<20 + 7

	recv, rout := child(t, dirR, "tcprecv")
	port := readLine(t, rout)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	send := exec.Command("/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$1"`, dirA, exe)
	send.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %d", foldChildEnv, port, n1, n2))
	send.Stderr = os.Stderr
	stdin, err := send.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := send.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.Kill(send) })
	out := bufio.NewReader(stdout)
	step := func(want int) {
		t.Helper()
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		if got := readLine(t, out); got != want {
			t.Fatalf("sender printed phase %d, want %d", got, want)
		}
	}
	pid := send.Process.Pid

	// Phase 1 in A; no read until the sender has moved to B and sent
	// phase 2 there: the move must have folded phase 1 to A.
	step(1)
	testenv.Move(t, dirB, pid)
	step(2)
	r := read()
	live := procProbe(t, r, pid)
	if live.TCPSentBytes != n1+n2 {
		t.Errorf("live sender: %d bytes sent, want %d", live.TCPSentBytes, n1+n2)
	}
	if a, b := cgroupProbe(r, idA), cgroupProbe(r, idB); a.TCPSentBytes != n1 || b.TCPSentBytes != n2 {
		t.Errorf("live sender moved A→B: A %d, B %d bytes sent; want %d, %d", a.TCPSentBytes, b.TCPSentBytes, n1, n2)
	}

	// Exit: the close counts no payload; the figures must not change.
	if _, err := io.WriteString(stdin, "done\n"); err != nil {
		t.Fatal(err)
	}
	if err := send.Wait(); err != nil {
		t.Fatalf("sender: %v", err)
	}
	if got := readLine(t, rout); got != n1+n2 {
		t.Fatalf("receiver got %d bytes, want %d", got, n1+n2)
	}
	if err := recv.Wait(); err != nil {
		t.Fatal(err)
	}
	r = read()
	if got := procProbe(t, r, pid).TCPSentBytes; got != n1+n2 {
		t.Errorf("exited sender: %d bytes sent, want %d", got, n1+n2)
	}
	if a, b := cgroupProbe(r, idA), cgroupProbe(r, idB); a.TCPSentBytes != n1 || b.TCPSentBytes != n2 {
		t.Errorf("exited sender: A %d, B %d bytes sent; want %d, %d", a.TCPSentBytes, b.TCPSentBytes, n1, n2)
	}
	// The receiver exited right after its last read: its exit fold has
	// it all, no free (an RCU grace period later) needed.
	if got := cgroupProbe(r, idR).TCPRecvBytes; got != n1+n2 {
		t.Errorf("exited receiver: %d bytes received, want %d", got, n1+n2)
	}
}
