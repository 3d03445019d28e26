package workload

import (
	"strings"
	"testing"

	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// Real-looking ids (64 hex for containers, a pod uid in both spellings).
const (
	cid  = "3f1c9a2b7d4e5f6071829a4b5c6d7e8f90112233445566778899aabbccddeeff"
	cid2 = "a0b1c2d3e4f5061728394a5b6c7d8e9f00112233445566778899aabbccddee01"
	uid  = "8f3e6a1c-2b4d-4e5f-9a7b-1c2d3e4f5a6b"
	uidU = "8f3e6a1c_2b4d_4e5f_9a7b_1c2d3e4f5a6b"
	// A static pod's uid is the hash of its manifest.
	staticUID = "5d0a3bba6b8f0e9b0b6e4e9d1e5c2f7a"
)

type parseCase struct {
	name string
	path string
	want ident.Identity
}

func runParse(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Parse(tc.path); got != tc.want {
				t.Errorf("Parse(%q)\n got %+v\nwant %+v", tc.path, got, tc.want)
			}
		})
	}
}

func TestParseContainers(t *testing.T) { runParse(t, containerCases()) }

// containerCases are TestParseContainers's cases, also read by TestParseGolden.
func containerCases() []parseCase {
	return []parseCase{
		{"docker systemd", "/system.slice/docker-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerDocker, ID: cid}},
		{"docker cgroupfs", "/docker/" + cid,
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerDocker, ID: cid}},
		{"docker in docker", "/docker/" + cid + "/docker/" + cid2,
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerDocker, ID: cid2}},
		{"docker dir alone", "/docker", ident.Identity{Kind: ident.KindCgroup}},
		{"containerd outside kubernetes", "/system.slice/cri-containerd-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: cid}},
		{"nerdctl", "/system.slice/nerdctl-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: cid}},
		{"crio", "/system.slice/crio-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerCRIO, ID: cid}},
		{"crio conmon is the monitor", "/system.slice/crio-conmon-" + cid + ".scope",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerCRIO, ID: "crio-conmon-" + cid + ".scope", Name: "crio-conmon-" + cid + ".scope", Part: "conmon"}},
		{"podman rootful", "/machine.slice/libpod-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerPodman, ID: cid}},
		{"podman conmon", "/machine.slice/libpod-conmon-" + cid + ".scope",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerPodman, ID: "libpod-conmon-" + cid + ".scope", Name: "libpod-conmon-" + cid + ".scope", Part: "conmon"}},
		{"podman rootless", "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerPodman, ID: cid, UID: "1000"}},
		{"podman split cgroups", "/machine.slice/libpod-" + cid + ".scope/container",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerPodman, ID: cid, Part: "container"}},
		{"podman cgroupfs", "/libpod_parent/libpod-" + cid,
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerPodman, ID: cid}},
		{"systemd inside a container", "/system.slice/docker-" + cid + ".scope/init.scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerDocker, ID: cid, Part: "init.scope"}},
		{"short id is no container", "/system.slice/docker-3f1c9a2b7d4e.scope",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "docker-3f1c9a2b7d4e.scope", Name: "docker-3f1c9a2b7d4e.scope"}},
	}
}

func TestParseKubernetes(t *testing.T) { runParse(t, kubernetesCases()) }

// kubernetesCases are TestParseKubernetes's cases, also read by TestParseGolden.
func kubernetesCases() []parseCase {
	return []parseCase{
		{"systemd burstable container", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: cid, PodUID: uid, QoS: "burstable"}},
		{"systemd besteffort crio", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerCRIO, ID: cid, PodUID: uid, QoS: "besteffort"}},
		{"systemd crio conmon in pod", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerCRIO, ID: "crio-conmon-" + cid + ".scope", Name: "crio-conmon-" + cid + ".scope", Part: "conmon", PodUID: uid, QoS: "besteffort"}},
		{"systemd guaranteed", "/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: cid, PodUID: uid, QoS: "guaranteed"}},
		{"systemd pod slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice",
			ident.Identity{Kind: ident.KindPod, Manager: ident.ManagerKubernetes, ID: uid, PodUID: uid, QoS: "burstable"}},
		{"systemd static pod", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticUID + ".slice/cri-containerd-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: cid, PodUID: staticUID, QoS: "burstable"}},
		{"systemd qos slice", "/kubepods.slice/kubepods-burstable.slice",
			ident.Identity{Kind: ident.KindCgroup, Manager: ident.ManagerKubernetes, QoS: "burstable"}},
		{"systemd kubepods", "/kubepods.slice", ident.Identity{Kind: ident.KindCgroup, Manager: ident.ManagerKubernetes}},
		{"kind node: pod in a docker container", "/system.slice/docker-" + cid2 + ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: cid, PodUID: uid, QoS: "besteffort"}},
		{"cgroupfs burstable", "/kubepods/burstable/pod" + uid + "/" + cid,
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerKubernetes, ID: cid, PodUID: uid, QoS: "burstable"}},
		{"cgroupfs guaranteed", "/kubepods/pod" + uid + "/" + cid,
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerKubernetes, ID: cid, PodUID: uid, QoS: "guaranteed"}},
		{"cgroupfs pod", "/kubepods/besteffort/pod" + uid,
			ident.Identity{Kind: ident.KindPod, Manager: ident.ManagerKubernetes, ID: uid, PodUID: uid, QoS: "besteffort"}},
		{"cgroupfs crio", "/kubepods/burstable/pod" + uid + "/crio-" + cid,
			ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerCRIO, ID: cid, PodUID: uid, QoS: "burstable"}},
		{"cgroupfs qos", "/kubepods/besteffort", ident.Identity{Kind: ident.KindCgroup, Manager: ident.ManagerKubernetes, QoS: "besteffort"}},
		{"pod dir outside kubepods", "/pod" + uid, ident.Identity{Kind: ident.KindCgroup}},
	}
}

func TestParseSlurm(t *testing.T) { runParse(t, slurmCases()) }

// slurmCases are TestParseSlurm's cases, also read by TestParseGolden.
func slurmCases() []parseCase {
	return []parseCase{
		{"v1 task", "/slurm/uid_1000/job_4711/step_0/task_1",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", UID: "1000", JobID: "4711", Step: "0", Task: "1"}},
		{"v1 batch step", "/slurm/uid_1000/job_4711/step_batch",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", UID: "1000", JobID: "4711", Step: "batch"}},
		{"v1 extern", "/slurm/uid_1000/job_4711/step_extern/task_0",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", UID: "1000", JobID: "4711", Step: "extern", Task: "0"}},
		{"v1 interactive", "/slurm/uid_2001/job_12/step_interactive",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "12", UID: "2001", JobID: "12", Step: "interactive"}},
		{"v1 job", "/slurm/uid_1000/job_4711",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", UID: "1000", JobID: "4711"}},
		{"v1 uid", "/slurm/uid_1000", ident.Identity{Kind: ident.KindCgroup, Manager: ident.ManagerSlurm, UID: "1000"}},
		{"v1 root", "/slurm", ident.Identity{Kind: ident.KindCgroup, Manager: ident.ManagerSlurm}},
		{"v1 multiple slurmd", "/slurm_node07/uid_1000/job_99/step_3/task_0",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "99", UID: "1000", JobID: "99", Step: "3", Task: "0", SlurmNode: "node07"}},
		{"v2 task", "/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", JobID: "4711", Step: "0", Task: "0"}},
		{"v2 task special", "/system.slice/slurmstepd.scope/job_4711/step_batch/user/task_special",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", JobID: "4711", Step: "batch", Task: "special"}},
		{"v2 stepd", "/system.slice/slurmstepd.scope/job_4711/step_0/slurm",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", Part: "stepd", JobID: "4711", Step: "0"}},
		{"v2 user level", "/system.slice/slurmstepd.scope/job_4711/step_extern/user",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", JobID: "4711", Step: "extern"}},
		{"v2 user's own cgroups below a task", "/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0/mine",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", Part: "mine", JobID: "4711", Step: "0", Task: "0"}},
		{"v2 multiple slurmd", "/system.slice/node07_slurmstepd.scope/job_99/step_1/user/task_2",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "99", JobID: "99", Step: "1", Task: "2", SlurmNode: "node07"}},
		{"v2 stepd scope system", "/system.slice/slurmstepd.scope/system",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "slurmstepd.scope", Name: "slurmstepd.scope", Part: "system"}},
		{"slurmd service", "/system.slice/slurmd.service",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "slurmd.service", Name: "slurmd.service"}},
		{"job outside slurm", "/job_4711", ident.Identity{Kind: ident.KindCgroup}},
	}
}

func TestParseSlurmCustomPattern(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Slurm.Job = append(cfg.Slurm.Job, `^jobid(?P<job>[0-9]+)$`)
	p, err := NewParser(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "7", JobID: "7", Step: "0", Task: "0"}
	if got := p.Parse("/system.slice/slurmstepd.scope/jobid7/step_0/user/task_0"); got != want {
		t.Errorf("custom pattern: got %+v, want %+v", got, want)
	}
	// The default layout still parses.
	want.ID, want.JobID = "8", "8"
	if got := p.Parse("/system.slice/slurmstepd.scope/job_8/step_0/user/task_0"); got != want {
		t.Errorf("default pattern: got %+v, want %+v", got, want)
	}
}

func TestNewParserRejectsBadPatterns(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*SlurmPatterns)
		want string
	}{
		{"syntax", func(s *SlurmPatterns) { s.Job = []string{`^job_(`} }, "slurm Job pattern: compile"},
		{"missing group", func(s *SlurmPatterns) { s.Step = []string{`^step_[0-9]+$`} }, `slurm Step pattern: "^step_[0-9]+$" has no (?P<step>…) group`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mod(&cfg.Slurm)
			_, err := NewParser(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseLibvirt(t *testing.T) { runParse(t, libvirtCases()) }

// libvirtCases are TestParseLibvirt's cases, also read by TestParseGolden.
func libvirtCases() []parseCase {
	return []parseCase{
		{"v2 scope", `/machine.slice/machine-qemu\x2d1\x2dweb01.scope`,
			ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "web01", VMName: "web01", DomainID: "1"}},
		{"v2 vcpu", `/machine.slice/machine-qemu\x2d1\x2dweb01.scope/libvirt/vcpu3`,
			ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "web01", Part: "vcpu3", VMName: "web01", DomainID: "1"}},
		{"v2 emulator", `/machine.slice/machine-qemu\x2d1\x2dweb01.scope/libvirt/emulator`,
			ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "web01", Part: "emulator", VMName: "web01", DomainID: "1"}},
		{"v1 systemd vcpu", `/machine.slice/machine-qemu\x2d1\x2dweb01.scope/vcpu0`,
			ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "web01", Part: "vcpu0", VMName: "web01", DomainID: "1"}},
		{"escaped dashes in the name", `/machine.slice/machine-qemu\x2d12\x2dmy\x2dvm\x2d2.scope`,
			ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "my-vm-2", VMName: "my-vm-2", DomainID: "12"}},
		{"openstack", `/machine.slice/machine-qemu\x2d3\x2dinstance\x2d0000002a.scope/libvirt/emulator`,
			ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "instance-0000002a", Part: "emulator", VMName: "instance-0000002a", DomainID: "3", Instance: "instance-0000002a"}},
		{"old libvirt without id", `/machine.slice/machine-qemu\x2dweb01.scope`,
			ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "web01", VMName: "web01"}},
		{"cgroupfs", "/machine/qemu-2-db01.libvirt-qemu/emulator",
			ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "db01", Part: "emulator", VMName: "db01", DomainID: "2"}},
		{"cgroupfs vcpu", "/machine/qemu-2-db01.libvirt-qemu/vcpu1",
			ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "db01", Part: "vcpu1", VMName: "db01", DomainID: "2"}},
		{"cgroupfs old", "/machine/db01.libvirt-qemu",
			ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "db01", VMName: "db01"}},
		{"nspawn machine is a unit", `/machine.slice/machine-fedora\x2d40.scope`,
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: `machine-fedora\x2d40.scope`, Name: "machine-fedora-40.scope"}},
	}
}

func TestParseUnits(t *testing.T) { runParse(t, unitCases()) }

// unitCases are TestParseUnits's cases, also read by TestParseGolden.
func unitCases() []parseCase {
	return []parseCase{
		{"service", "/system.slice/sshd.service",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "sshd.service", Name: "sshd.service"}},
		{"slice", "/system.slice", ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "system.slice", Name: "system.slice"}},
		{"init", "/init.scope", ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "init.scope", Name: "init.scope"}},
		{"user manager", "/user.slice/user-1000.slice/user@1000.service",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "user@1000.service", Name: "user@1000.service", UID: "1000"}},
		{"user slice", "/user.slice/user-1000.slice",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "user-1000.slice", Name: "user-1000.slice", UID: "1000"}},
		{"session", "/user.slice/user-1000.slice/session-3.scope",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "session-3.scope", Name: "session-3.scope", UID: "1000"}},
		{"user app", "/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1b2c.scope",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "vte-spawn-1b2c.scope", Name: "vte-spawn-1b2c.scope", UID: "1000"}},
		{"escaped", `/system.slice/system-systemd\x2dfsck.slice/systemd-fsck@dev-disk-by\x2duuid-1234.service`,
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: `systemd-fsck@dev-disk-by\x2duuid-1234.service`, Name: "systemd-fsck@dev-disk-by-uuid-1234.service"}},
		{"delegated subtree", "/system.slice/foo.service/worker",
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "foo.service", Name: "foo.service", Part: "worker"}},
	}
}

func TestParsePlain(t *testing.T) { runParse(t, plainCases()) }

// plainCases are TestParsePlain's cases, also read by TestParseGolden.
func plainCases() []parseCase {
	return []parseCase{
		{"root", "/", ident.Identity{Kind: ident.KindCgroup}},
		{"empty", "", ident.Identity{Kind: ident.KindCgroup}},
		{"plain", "/foo/bar", ident.Identity{Kind: ident.KindCgroup}},
		{"double slashes", "//foo//", ident.Identity{Kind: ident.KindCgroup}},
	}
}

func TestOwner(t *testing.T) {
	c := Parse("/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope")
	c.Pod, c.Namespace, c.Container, c.Name = "web-0", "shop", "nginx", "nginx"
	o, ok := c.Owner()
	want := ident.Identity{Kind: ident.KindPod, Manager: ident.ManagerKubernetes, ID: uid, Name: "web-0", PodUID: uid, Pod: "web-0", Namespace: "shop", QoS: "guaranteed"}
	if !ok || o != want {
		t.Errorf("container owner = %+v, %v; want %+v", o, ok, want)
	}
	if _, ok := o.Owner(); ok {
		t.Errorf("pod has an owner")
	}
	task := Parse("/slurm/uid_1000/job_4711/step_0/task_1")
	task.User = "alice"
	o, ok = task.Owner()
	wantJob := ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", UID: "1000", User: "alice", JobID: "4711"}
	if !ok || o != wantJob {
		t.Errorf("task owner = %+v, %v; want %+v", o, ok, wantJob)
	}
	vcpu := Parse(`/machine.slice/machine-qemu\x2d1\x2dweb01.scope/libvirt/vcpu0`)
	o, ok = vcpu.Owner()
	if wantVM := Parse(`/machine.slice/machine-qemu\x2d1\x2dweb01.scope`); !ok || o != wantVM {
		t.Errorf("vcpu owner = %+v, %v; want %+v", o, ok, wantVM)
	}
	if _, ok := Parse("/system.slice/sshd.service").Owner(); ok {
		t.Errorf("unit has an owner")
	}
}
