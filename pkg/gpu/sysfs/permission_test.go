package sysfs

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wattrace/wattrace/internal/gpu/sysfs/sysfstest"
	"github.com/wattrace/wattrace/internal/testenv"
)

// Without the permission to read other
// users' /proc/PID/fd (the kernel's ptrace access check), the source says
// so: its health carries the reason fdinfo_no_permission, one warning is
// logged (not one per interval), and an Intel card's utilization is not
// taken as known. The real kernel decides: as root the test runs itself
// again as nobody with no capabilities, against the real /proc, where
// PID 1's fds are not readable.
func TestFdinfoPermissionIsHealth(t *testing.T) {
	if testenv.AsNobody(t, "TestFdinfoPermissionIsHealth") {
		permissionChild(t)
	}
}

func permissionChild(t *testing.T) {
	tr := sysfstest.NewTree(t)
	tr.Card(0, "0000:05:00.0", "i915", map[string]string{"energy1_input": "100000000"})
	core, logs := observer.New(zap.WarnLevel)
	src, err := Open(Options{SysfsRoot: tr.Sys, ProcfsRoot: "/proc"}, zap.New(core))
	if err != nil || src == nil {
		t.Fatalf("Open: %v %v", src, err)
	}
	now := time.Now()
	for k := 0; k < 3; k++ {
		rs, _ := src.Read(context.Background(), now.Add(time.Duration(k)*time.Second))
		if k > 0 && rs[0].UtilizationKnown {
			t.Errorf("utilization known with other users' clients unreadable")
		}
	}
	if src.scanner.Denied() == 0 {
		t.Fatalf("uid %d: no process denied (is PID 1 readable?)", os.Geteuid())
	}
	h := src.Health()
	if len(h) != 1 || h[0].Reason != "fdinfo_no_permission" {
		t.Fatalf("health %+v", h)
	}
	if logs.Len() != 1 || !strings.Contains(logs.All()[0].Message, "CAP_SYS_PTRACE") {
		t.Fatalf("logs %v", logs.All())
	}
}
