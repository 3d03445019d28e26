package guestshare

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// holdEnv makes the test binary, run as a child, a writer on the root it
// names that holds the lock until its stdin closes: a second exporter in
// a process of its own, as on a host.
const holdEnv = "WATTRACE_GUESTSHARE_HOLD"

func TestMain(m *testing.M) {
	if root := os.Getenv(holdEnv); root != "" {
		w, err := New(Config{Dir: root, Interval: time.Second, Host: "hv1"})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("held")
		_, _ = io.Copy(io.Discard, os.Stdin)
		w.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A second writer on a root another process writes fails to start, and
// says which process holds it; once that process is gone (its lock goes
// with it, however it ends) a writer starts.
func TestWriterLockOneWriterPerRoot(t *testing.T) {
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+root)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("holder said %q, %v", line, err)
	}

	_, err = New(Config{Dir: root, Interval: time.Second, Host: "hv1"})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(cmd.Process.Pid)) ||
		!strings.Contains(err.Error(), "guests.share.path") {
		t.Fatalf("second writer: %v; want ErrLocked naming pid %d and the setting", err, cmd.Process.Pid)
	}

	// The holder is killed, not closed: the kernel releases its lock.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	w, err := New(Config{Dir: root, Interval: time.Second, Host: "hv1"})
	if err != nil {
		t.Fatalf("after the holder exited: %v", err)
	}
	if err := w.Write(snap(1, 5, 0)); err != nil {
		t.Fatal(err)
	}
	// Within one process too, a second writer is refused while the first
	// lives, and a closed writer writes nothing.
	if _, err := New(Config{Dir: root, Interval: time.Second, Host: "hv1"}); !errors.Is(err, ErrLocked) {
		t.Errorf("second writer in-process: %v, want ErrLocked", err)
	}
	w.Close()
	if err := w.Write(snap(2, 6, 0)); err == nil {
		t.Error("a closed writer wrote")
	}
}
