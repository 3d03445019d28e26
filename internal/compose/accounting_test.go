package compose

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/wattrace/wattrace/internal/bpfloader"
	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

// One opener for both programs: BPF where it loads; where it cannot, the
// exporter falls back to procfs and measure (NoProcfs) to nothing, each
// told why; bpf mode fails; an unknown mode is an error of its own.
func TestOpenAccounting(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	res := cgroup.NewResolver(h)
	a, err := OpenAccounting(AccountingConfig{Mode: AcctAuto, Hierarchy: h, Resolver: res}, nil)
	if err != nil || a.BPF == nil || a.Src.Mode() != bpfloader.Mode || a.Fallback != nil {
		t.Fatalf("auto with BPF: %+v, %v", a, err)
	}
	_ = a.BPF.Close()
	noBTF := filepath.Join(t.TempDir(), "vmlinux")
	a, err = OpenAccounting(AccountingConfig{Mode: AcctAuto, Hierarchy: h, Resolver: res, BTFPath: noBTF}, nil)
	if err != nil || a.BPF != nil || a.Src == nil || a.Src.Mode() != "procfs" || a.Fallback == nil {
		t.Errorf("auto without BPF: %+v, %v; want procfs and the reason", a, err)
	}
	a, err = OpenAccounting(AccountingConfig{Mode: AcctAuto, Hierarchy: h, BTFPath: noBTF, NoProcfs: true}, nil)
	if err != nil || a.Src != nil || a.Fallback == nil {
		t.Errorf("auto without BPF or procfs: %+v, %v; want no source and the reason", a, err)
	}
	if _, err = OpenAccounting(AccountingConfig{Mode: AcctBPF, Hierarchy: h, BTFPath: noBTF}, nil); err == nil {
		t.Error("bpf mode without BPF: no error")
	}
	if _, err = OpenAccounting(AccountingConfig{Mode: "perf"}, nil); !errors.Is(err, ErrAccountingMode) {
		t.Errorf("unknown mode: %v", err)
	}
}
