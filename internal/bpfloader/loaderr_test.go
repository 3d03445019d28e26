package bpfloader

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/pkg/cgroup"
)

// A load failure names what the user can fix.
func TestLoadErrorsNameTheCause(t *testing.T) {
	log := zap.NewNop()
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("map create: %w", unix.EPERM), "CAP_BPF and CAP_PERFMON"},
		{fmt.Errorf("prog load: %w", unix.EACCES), "CAP_BPF and CAP_PERFMON"},
		{fmt.Errorf("iter: %w", ebpf.ErrNotSupported), "Linux 5.12"},
	} {
		got := explainLoadError(c.err, log)
		if !strings.Contains(got.Error(), c.want) || !errors.Is(got, c.err) {
			t.Errorf("%v → %q, want it to mention %q and wrap the cause", c.err, got, c.want)
		}
	}

	_, err := Load(Options{Hierarchy: cgroup.Hierarchy{Kind: cgroup.V2}, BTFPath: "/nonexistent/vmlinux"})
	if err == nil || !strings.Contains(err.Error(), "BTF") || !strings.Contains(err.Error(), "CONFIG_DEBUG_INFO_BTF") {
		t.Errorf("missing BTF: %v", err)
	}
}

// A verifier rejection says so, and debug logging carries the log's tail.
func TestVerifierLogTail(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	lines := make([]string, 50)
	for i := range lines {
		lines[i] = fmt.Sprintf("insn %d", i)
	}
	ve := &ebpf.VerifierError{Cause: unix.EINVAL, Log: lines}
	err := explainLoadError(fmt.Errorf("load dump_task: %w", ve), zap.New(core))
	if !strings.Contains(err.Error(), "verifier rejected") {
		t.Errorf("error %q does not say the verifier rejected the program", err)
	}
	got := logs.FilterMessage("verifier").All()
	if len(got) != 20 || got[19].ContextMap()["line"] != "insn 49" || got[0].ContextMap()["line"] != "insn 30" {
		t.Errorf("logged %d verifier lines, want the last 20 (insn 30–49)", len(got))
	}
}
