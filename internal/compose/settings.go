package compose

import "github.com/wattrace/wattrace/internal/setting"

// AccountingModes are accounting.mode's values.
var AccountingModes = []string{AcctAuto, AcctBPF, AcctProcfs}

// Declare declares accounting.mode, bound to c.Mode; the rest of c is
// what the program learns at start-up.
func (c *AccountingConfig) Declare(s *setting.Set) {
	s.Enum(&c.Mode, "accounting.mode", AcctAuto, AccountingModes, "Per-task CPU accounting: bpf, procfs, or auto (bpf, falling back to procfs when BPF cannot be loaded).")
}
