package sourcehealth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wattrace/wattrace/pkg/reading"
)

func TestTallyCountsReadsErrorsRejectionsAndAge(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	tl := New("redfish", Options{Log: zap.New(core), Now: clock})

	if h := tl.Health(); h.Up || h.Reads != 0 || h.Age != 0 {
		t.Fatalf("before any read: %+v, want down, 0 reads, age 0", h)
	}
	now = now.Add(3 * time.Second)
	tl.Read(nil)
	now = now.Add(2 * time.Second)
	if h := tl.Health(); !h.Up || h.Reads != 1 || h.Errors != 0 || h.Age != 2*time.Second {
		t.Fatalf("after a good read: %+v, want up, 1 read, age 2s", h)
	}
	// Two failures within a minute: both counted, one warning.
	tl.Read(errors.New("timeout"))
	now = now.Add(10 * time.Second)
	tl.Read(errors.New("timeout"))
	if !tl.Reject(reading.Reject(reading.TooFast, 9e9, "jump"), "platform/-1") {
		t.Fatal("a *reading.Rejection was not counted")
	}
	if tl.Reject(errors.New("not a rejection"), "x") {
		t.Fatal("a plain error was counted as a rejection")
	}
	h := tl.Health()
	if h.Up || h.Reads != 3 || h.Errors != 2 || h.Age != 12*time.Second || h.Rejected["too_fast"] != 1 || len(h.Rejected) != 1 {
		t.Fatalf("after two failures and a rejection: %+v", h)
	}
	if n := logs.FilterMessage("source read failed").Len(); n != 1 {
		t.Errorf("%d failure warnings within a minute, want 1", n)
	}
	now = now.Add(time.Minute)
	tl.Read(errors.New("timeout"))
	if n := logs.FilterMessage("source read failed").Len(); n != 2 {
		t.Errorf("%d failure warnings after a minute, want 2", n)
	}
	// A part of the source failing leaves it as it was.
	tl.Read(nil)
	tl.Count(errors.New("one cgroup unreadable"))
	if h := tl.Health(); !h.Up || h.Reads != 6 || h.Errors != 4 {
		t.Errorf("after a partial failure: %+v, want up, 6 reads, 4 errors", h)
	}
}

// A synchronous source (no clock) reports age 0; tallies sharing one
// Rejects (a GPU source's devices) report the shared counts.
func TestTallySynchronousAndShared(t *testing.T) {
	shared := reading.NewRejects("nvml", nil)
	a := New("nvml/GPU-a", Options{Rejects: shared})
	b := New("nvml/GPU-b", Options{Rejects: shared})
	a.Reject(reading.Reject(reading.OutOfRange, 5000, "above 2000 W"), "GPU-a")
	a.Read(nil)
	b.Read(errors.New("gpu lost"))
	ha, hb := a.Health(), b.Health()
	if ha.Age != 0 || !ha.Up || ha.Rejected["out_of_range"] != 1 {
		t.Errorf("a: %+v", ha)
	}
	if hb.Up || hb.Errors != 1 || hb.Rejected["out_of_range"] != 1 || hb.Source != "nvml/GPU-b" {
		t.Errorf("b: %+v", hb)
	}
}

// A read that overran its deadline is a failed read and a rejected
// reading of reason late, and while it is the latest the source says why
// it is down; a late rejection the caller counted with Reject is not
// counted twice, and the next good read clears the reason.
func TestTallyLateReads(t *testing.T) {
	tl := New("redfish", Options{})
	tl.Read(nil)
	tl.Read(fmt.Errorf("GET /redfish/v1/Chassis: %w", context.DeadlineExceeded))
	h := tl.Health()
	if h.Up || h.Errors != 1 || h.Rejected["late"] != 1 || h.Reason != reading.ReasonDeadline {
		t.Fatalf("after a read cut off by its context: %+v, want down, 1 error, 1 late, reason %s", h, reading.ReasonDeadline)
	}
	late := reading.LateRead(2 * time.Second)
	tl.Reject(late, "platform/-1")
	tl.Read(late)
	tl.Read(&net.OpError{Op: "read", Net: "vsock", Err: os.ErrDeadlineExceeded})
	if h := tl.Health(); h.Errors != 3 || h.Rejected["late"] != 3 || h.Reason != reading.ReasonDeadline {
		t.Fatalf("after a counted late rejection and a connection deadline: %+v, want 3 errors, 3 late", h)
	}
	tl.Read(errors.New("connection refused"))
	if h := tl.Health(); h.Reason != "" || h.Rejected["late"] != 3 {
		t.Fatalf("after a failure that was not late: %+v, want no reason, still 3 late", h)
	}
	late = reading.LateRead(time.Second)
	tl.Reject(late, "platform/-1")
	tl.Read(late)
	tl.Read(nil)
	if h := tl.Health(); !h.Up || h.Reason != "" || h.Rejected["late"] != 4 {
		t.Fatalf("after a good read: %+v, want up, no reason, 4 late", h)
	}
}
