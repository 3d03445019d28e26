package workload

import (
	"fmt"
	"regexp"
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
	return SlurmPatterns{
		Root:  []string{`^slurm(?:_(?P<node>[^/]+))?$`},
		Stepd: []string{`^(?:(?P<node>[^/]+)_)?slurmstepd\.scope$`},
		UID:   []string{`^uid_(?P<uid>[0-9]+)$`},
		Job:   []string{`^job_(?P<job>[0-9]+)$`},
		SLUID: []string{`^(?P<sluid>s[0-9A-F][0-9A-HJKMNP-TV-Z]{12})$`},
		Step:  []string{`^step_(?P<step>[0-9]+(?:\.[0-9]+)?|batch|extern|interactive)$`},
		Task:  []string{`^task_(?P<task>[0-9]+|special)$`},
	}
}

// pattern is one compiled alternative and the index of the group it reads
// (0 when the group is optional and absent from this pattern).
type pattern struct {
	re    *regexp.Regexp
	group int
}

type patterns []pattern

// into matches comp and stores the captured value into dst, reporting
// whether it matched, so a switch case can match and record in one.
func (ps patterns) into(comp string, dst *string) bool {
	v, ok := ps.match(comp)
	if ok {
		*dst = v
	}
	return ok
}

// match returns whether comp matches and the named group's text ("" when
// the group did not take part).
func (ps patterns) match(comp string) (string, bool) {
	for _, p := range ps {
		m := p.re.FindStringSubmatchIndex(comp)
		if m == nil {
			continue
		}
		if p.group == 0 || m[2*p.group] < 0 {
			return "", true
		}
		return comp[m[2*p.group]:m[2*p.group+1]], true
	}
	return "", false
}

type slurmRules struct {
	root, stepd, uid, job, sluid, step, task patterns
}

func compileSlurm(sp SlurmPatterns) (slurmRules, error) {
	var r slurmRules
	var err error
	for _, f := range []struct {
		field    string
		src      []string
		group    string
		required bool
		dst      *patterns
	}{
		{"Root", sp.Root, "node", false, &r.root},
		{"Stepd", sp.Stepd, "node", false, &r.stepd},
		{"UID", sp.UID, "uid", true, &r.uid},
		{"Job", sp.Job, "job", true, &r.job},
		{"SLUID", sp.SLUID, "sluid", true, &r.sluid},
		{"Step", sp.Step, "step", true, &r.step},
		{"Task", sp.Task, "task", true, &r.task},
	} {
		if *f.dst, err = compilePatterns(f.src, f.group, f.required); err != nil {
			return slurmRules{}, fmt.Errorf("slurm %s pattern: %w", f.field, err)
		}
	}
	return r, nil
}

func compilePatterns(src []string, group string, required bool) (patterns, error) {
	out := make(patterns, 0, len(src))
	for _, s := range src {
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("compile %q: %w", s, err)
		}
		g := re.SubexpIndex(group)
		if g < 0 {
			if required {
				return nil, fmt.Errorf("%q has no (?P<%s>…) group", s, group)
			}
			g = 0
		}
		out = append(out, pattern{re: re, group: g})
	}
	return out, nil
}
