package workload

import (
	"slices"

	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// SlurmPatterns recognise the components of Slurm's cgroup paths. Each field
// lists regular expressions matched against one whole path component; the
// first that matches wins, and its named groups give the ids:
//
//	Root   v1 top cgroup, /slurm or /slurm_<node>:   (?P<node>…) optional
//	Stepd  v2 scope, [<node>_]slurmstepd.scope:      (?P<node>…) optional
//	UID    v1 uid_<uid> below Root:                  (?P<uid>…) required
//	Job    job_<id> below Root, UID or Stepd:        (?P<job>…) required
//	SLUID  the job's SLUID below Stepd (26.05):      (?P<sluid>…) required
//	Step   step_<n> below Job:                       (?P<step>…) required
//	Task   task_<k> below Step (v1) or Step/user (v2): (?P<task>…) required
//
// To follow a Slurm release that renames its cgroups, append a pattern
// rather than replace the defaults (hosts upgrade one at a time):
//
//	cfg := workload.DefaultConfig()
//	cfg.Slurm.Job = append(cfg.Slurm.Job, `^jobid(?P<job>[0-9]+)$`)
//	p, err := workload.NewParser(cfg)
//
// and add a row with a real path to the Slurm table in parse_test.go.
type SlurmPatterns struct {
	Root, Stepd, UID, Job, SLUID, Step, Task []string
}

// DefaultSlurmPatterns are the layouts of Slurm's cgroup/v1 and cgroup/v2
// plugins (Slurm 20.11 to 26.05). Step names are numbers or batch, extern,
// interactive; "special" is the task cgroup for processes of no task.
//
// From 26.05 the cgroup/v2 plugin names a job's directory by its SLUID
// unless cgroup.conf has CgroupJobIdPaths=yes (26.05.2+), which keeps
// job_<id>. A SLUID is printed by print_sluid (src/common/sluid.c) as a
// lower-case "s" and 13 digits of Crockford's base32 in upper case
// (0-9, A-Z less I, L, O, U); the first digit holds the top 4 of the 64
// bits, so it is at most F. The directory is the only place the path
// names the job: its numeric id comes from the job's processes (see
// Resolver).
func DefaultSlurmPatterns() SlurmPatterns {
	var sp SlurmPatterns
	for _, f := range sp.slots() {
		*f.patterns = slices.Clone(builtinSlot(f.slot))
	}
	return sp
}

// slurmSlot ties a SlurmPatterns field to the slot of its rules in the job
// level's grammar (ident/kinds.go).
type slurmSlot struct {
	field, slot string
	patterns    *[]string
}

func (sp *SlurmPatterns) slots() []slurmSlot {
	return []slurmSlot{
		{"Root", ident.SlotSlurmRoot, &sp.Root},
		{"Stepd", ident.SlotSlurmStepd, &sp.Stepd},
		{"UID", ident.SlotSlurmUID, &sp.UID},
		{"Job", ident.SlotSlurmJob, &sp.Job},
		{"SLUID", ident.SlotSlurmSLUID, &sp.SLUID},
		{"Step", ident.SlotSlurmStep, &sp.Step},
		{"Task", ident.SlotSlurmTask, &sp.Task},
	}
}

// builtinSlot returns the built-in patterns of a slot.
func builtinSlot(slot string) []string {
	for _, g := range ident.Grammars() {
		for _, r := range g.Grammar.Rules {
			if r.Slot == slot {
				return r.Pattern
			}
		}
	}
	return nil
}
