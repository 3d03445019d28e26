package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/gpu/alloc"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Without the permission to read other users' /proc/PID/environ, the
// Slurm allocation source says so: its health reason is
// environ_no_permission and one warning is logged, however many
// intervals. Run as nobody against the real /proc (PID 1's environ).
func TestSlurmEnvironPermissionIsHealth(t *testing.T) {
	if !testenv.AsNobody(t, "TestSlurmEnvironPermissionIsHealth") {
		return
	}
	core, logs := observer.New(zap.WarnLevel)
	g := New(Config{}, nil, []alloc.Source{&alloc.Slurm{ProcRoot: "/proc"}}, zap.New(core))
	var iv *reading.GPUInterval
	for k := 0; k < 3; k++ {
		iv = g.Interval(context.Background(), time.Now())
	}
	if len(iv.Health) != 1 || iv.Health[0].Reason != "environ_no_permission" {
		t.Fatalf("health %+v", iv.Health)
	}
	if logs.Len() != 1 || !strings.Contains(logs.All()[0].Message, "CAP_SYS_PTRACE") {
		t.Fatalf("logs %v", logs.All())
	}
}
