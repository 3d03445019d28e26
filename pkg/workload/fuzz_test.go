package workload

import (
	"regexp"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// pbsJobID is a PBS job id as its server writes it (<sequence>.<server>,
// <sequence>[<index>].<server>), written out again here so that the
// property does not take the parser's own pattern on trust.
var pbsJobID = regexp.MustCompile(`^[0-9]{1,12}(?:\[[0-9]{0,12}\])?\.[A-Za-z0-9][A-Za-z0-9.-]{0,254}$`)

// FuzzParse checks that Parse never panics, always reports a known Kind, and
// takes every id from the path itself: a pod uid may have had its
// underscores turned into dashes, the only rewrite Parse does to an id.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	kinds := map[ident.Kind]bool{ident.KindContainer: true, ident.KindPod: true, ident.KindVM: true, ident.KindJob: true, ident.KindSystemdUnit: true, ident.KindCgroup: true, ident.KindPBSJob: true}
	f.Fuzz(func(t *testing.T, path string) {
		id := Parse(path)
		if !kinds[id.Kind] {
			t.Fatalf("Parse(%q).Kind = %q", path, id.Kind)
		}
		if again := Parse(path); again != id {
			t.Fatalf("Parse(%q) not deterministic: %+v then %+v", path, id, again)
		}
		for name, v := range map[string]string{
			"JobID": id.JobID, "Step": id.Step, "Task": id.Task, "UID": id.UID,
			"DomainID": id.DomainID, "SlurmNode": id.SlurmNode, "SLUID": id.SLUID,
		} {
			if !strings.Contains(path, v) {
				t.Fatalf("Parse(%q).%s = %q, not in the path", path, name, v)
			}
		}
		if id.Kind != ident.KindVM && id.Kind != ident.KindPod && !strings.Contains(path, id.ID) {
			t.Fatalf("Parse(%q).ID = %q, not in the path", path, id.ID)
		}
		if id.PodUID != "" && !strings.Contains(path, id.PodUID) && !strings.Contains(path, strings.ReplaceAll(id.PodUID, "-", "_")) {
			t.Fatalf("Parse(%q).PodUID = %q, not in the path", path, id.PodUID)
		}
		if id.QoS != "" && id.QoS != "guaranteed" && !strings.Contains(path, id.QoS) {
			t.Fatalf("Parse(%q).QoS = %q, not in the path", path, id.QoS)
		}
		// A Slurm job is named by its id or (26.05) its SLUID, never both
		// from a path.
		if (id.Kind == ident.KindJob) != (id.JobID != "" || id.SLUID != "") || (id.JobID != "" && id.SLUID != "") {
			t.Fatalf("Parse(%q): Kind %q with JobID %q, SLUID %q", path, id.Kind, id.JobID, id.SLUID)
		}
		if id.Kind == ident.KindPBSJob && (id.Manager != ident.ManagerPBS || !pbsJobID.MatchString(id.ID)) {
			t.Fatalf("Parse(%q): PBS job %+v", path, id)
		}
		if (id.Kind == ident.KindPod) && id.ID != id.PodUID {
			t.Fatalf("Parse(%q): pod ID %q != PodUID %q", path, id.ID, id.PodUID)
		}
	})
}

// fuzzSeeds are FuzzParse's seeds, also read by TestParseGolden.
func fuzzSeeds() []string {
	return []string{
		"/", "", "/system.slice/docker-" + cid + ".scope", "/docker/" + cid,
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
		"/kubepods/burstable/pod" + uid + "/" + cid,
		"/slurm_n1/uid_1000/job_4711/step_batch/task_0",
		"/system.slice/n1_slurmstepd.scope/job_4711/step_0/user/task_0",
		"/system.slice/slurmstepd.scope/job_4711/step_0/slurm",
		`/machine.slice/machine-qemu\x2d1\x2dweb\x2d01.scope/libvirt/vcpu0`,
		"/machine/qemu-2-db01.libvirt-qemu/emulator",
		`/system.slice/systemd-fsck@dev-disk-by\x2duuid-1.service`,
		"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-conmon-" + cid + ".scope",
		`machine-qemu\x2d\x31\x2dx.scope`,
		"/slurm.slice/n1_slurmstepd.scope/sEKNKTV3WPV500/step_extern/user/task_0",
		"/pbs_jobs.service/jobid/123[4].pbs01", "/pbs_jobs.service/jobs/7.srv/rank0",
	}
}
