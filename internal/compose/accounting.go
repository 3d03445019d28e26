package compose

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/bpfloader"
	"github.com/wattrace/wattrace/internal/procfs"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Accounting modes (accounting.mode; measure's --accounting maps onto
// them).
const (
	AcctAuto   = "auto"   // BPF, else the fallback
	AcctBPF    = "bpf"    // BPF or fail
	AcctProcfs = "procfs" // /proc's per-task times
)

// AccountingConfig is what the per-task CPU accounting is opened with.
type AccountingConfig struct {
	Mode      string
	Hierarchy cgroup.Hierarchy
	// Resolver, ProcfsRoot and CPUs are the procfs source's.
	Resolver   *cgroup.Resolver
	ProcfsRoot string
	CPUs       int
	// NoProcfs: in auto mode, a BPF failure leaves no source (Src nil,
	// Fallback saying why) rather than procfs: `wattrace measure` then
	// reads the command's own cgroup, which it made.
	NoProcfs bool
	// BTFPath is the kernel's BTF (/sys/kernel/btf/vmlinux when empty).
	BTFPath string
	// Keep is where a process per command (`wattrace measure`) keeps the
	// loaded BPF programs for the boot, so that the next one skips the
	// load (bpfloader.Options.Keep); "" loads and unloads them each time,
	// as the exporter, which loads once, does.
	Keep string
}

// UsageSource is the per-task CPU accounting source as both programs
// hold it: read each interval (the stats loop, measure), closed at exit.
// bpfloader.Accounting and procfs.Source implement it.
type UsageSource interface {
	Read() (reading.Usage, error)
	// Mode is "bpf" or "procfs".
	Mode() string
	Close() error
}

// Accounting is the per-task CPU accounting source. BPF is set in BPF
// mode only (the probes and the program statistics need it); Fallback is
// why BPF is not used, in auto mode.
type Accounting struct {
	Src      UsageSource
	BPF      *bpfloader.Accounting
	Fallback error
}

// ErrAccountingMode is a mode no source answers to.
var ErrAccountingMode = errors.New("invalid accounting mode")

// OpenAccounting opens the accounting both programs use: the BPF
// programs (bpfloader) and, where BPF cannot load, procfs.
func OpenAccounting(cfg AccountingConfig, log *zap.Logger) (Accounting, error) {
	if log == nil {
		log = zap.NewNop()
	}
	openProcfs := func() (UsageSource, error) {
		s, err := procfs.New(procfs.Options{ProcfsRoot: cfg.ProcfsRoot, Hierarchy: cfg.Hierarchy, Resolver: cfg.Resolver,
			Logger: log.Named("procfs"), CPUs: cfg.CPUs})
		if err != nil {
			return nil, fmt.Errorf("procfs accounting: %w", err)
		}
		return s, nil
	}
	switch cfg.Mode {
	case AcctProcfs:
		s, err := openProcfs()
		if err != nil {
			return Accounting{}, err
		}
		return Accounting{Src: s}, nil
	case AcctBPF, AcctAuto:
		acc, err := bpfloader.Load(bpfloader.Options{Hierarchy: cfg.Hierarchy, Log: log.Named("bpf"), BTFPath: cfg.BTFPath, Keep: cfg.Keep})
		if err == nil {
			return Accounting{Src: acc, BPF: acc}, nil
		}
		if cfg.Mode == AcctBPF {
			return Accounting{}, fmt.Errorf("loading BPF programs: %w", err)
		}
		if cfg.NoProcfs {
			return Accounting{Fallback: err}, nil
		}
		s, perr := openProcfs()
		if perr != nil {
			return Accounting{}, fmt.Errorf("BPF failed (%v) and %w", err, perr)
		}
		return Accounting{Src: s, Fallback: err}, nil
	}
	return Accounting{}, fmt.Errorf("%w %q", ErrAccountingMode, cfg.Mode)
}
