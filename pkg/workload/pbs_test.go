package workload

import (
	"testing"

	"github.com/wattrace/wattrace/pkg/workload/ident"
)

func TestParsePBS(t *testing.T) { runParse(t, pbsCases()) }

// pbsCases are TestParsePBS's cases, also read by TestParseGolden.
func pbsCases() []parseCase {
	pbs := func(jid, part string) ident.Identity {
		return ident.Identity{Kind: ident.KindPBSJob, Manager: ident.ManagerPBS, ID: jid, Part: part}
	}
	unit := func(part string) ident.Identity {
		return ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "pbs_jobs.service", Name: "pbs_jobs.service", Part: part}
	}
	return []parseCase{
		{"v1 job", "/pbs_jobs.service/jobid/12345.pbs01", pbs("12345.pbs01", "")},
		{"v1 array subjob", "/pbs_jobs.service/jobid/12346[3].pbs01.example.org", pbs("12346[3].pbs01.example.org", "")},
		{"v2 job", "/pbs_jobs.service/jobs/4711.srv", pbs("4711.srv", "")},
		{"v2 job's own cgroup", "/pbs_jobs.service/jobs/4711.srv/rank0", pbs("4711.srv", "rank0")},
		{"the hook's service", "/pbs_jobs.service", unit("")},
		{"the jobs level", "/pbs_jobs.service/jobid", unit("jobid")},
		// Not job ids: no server, a name, a path the hook never makes.
		{"no server", "/pbs_jobs.service/jobid/12345", unit("jobid/12345")},
		{"a name", "/pbs_jobs.service/jobs/myjob.srv", unit("jobs/myjob.srv")},
		{"elsewhere", "/system.slice/jobs/4711.srv", ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd,
			ID: "system.slice", Name: "system.slice", Part: "jobs/4711.srv"}},
		{"inside a container", "/system.slice/docker-" + cid64 + ".scope/pbs_jobs.service/jobs/4711.srv",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerDocker, ID: cid64, Part: "pbs_jobs.service/jobs/4711.srv"}},
	}
}

const cid64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// A PBS job's owner is the first process of its cgroups that is not
// root's (a prologue runs as root).
func TestResolvePBSOwner(t *testing.T) {
	h := newHost(t, "systemd")
	h.cgroup("/pbs_jobs.service/jobid/7.srv", "40\n")
	h.cgroup("/pbs_jobs.service/jobid/7.srv/sub", "41\n")
	h.process("40", "status", "Uid:\t0\t0\t0\t0\n")
	h.process("41", "status", "Uid:\t2001\t2001\t2001\t2001\n")
	h.cgroup("/pbs_jobs.service/jobid/8.srv", "50\n")
	h.process("50", "status", "Uid:\t0\t0\t0\t0\n")
	r := h.resolver(nil)
	checkResolve(t, r, "/pbs_jobs.service/jobid/7.srv", ident.Identity{Kind: ident.KindPBSJob, Manager: ident.ManagerPBS, ID: "7.srv", UID: "2001", User: "bob"})
	checkResolve(t, r, "/pbs_jobs.service/jobid/8.srv", ident.Identity{Kind: ident.KindPBSJob, Manager: ident.ManagerPBS, ID: "8.srv"})
}
