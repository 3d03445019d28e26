package workload

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/workload/ident"
	"github.com/wattrace/wattrace/pkg/workload/kube"
)

// host is a fixture host: etc and libvirt XML from testdata, procfs and
// the cgroup hierarchy built in a temporary directory (cgroup paths hold
// backslashes, which module zips do not allow in committed file names).
type host struct {
	t          *testing.T
	proc, cg   string
	etc        string
	libvirtDir []string
}

func newHost(t *testing.T, fixture string) *host {
	t.Helper()
	root := filepath.Join("testdata", "hosts", fixture)
	tmp := t.TempDir()
	return &host{t: t, proc: filepath.Join(tmp, "proc"), cg: filepath.Join(tmp, "cgroup"), etc: filepath.Join(root, "etc"),
		libvirtDir: []string{filepath.Join(root, "run/libvirt/qemu"), filepath.Join(root, "etc/libvirt/qemu")}}
}

func (h *host) write(path, data string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// cgroup creates a cgroup with these processes ("" for none).
func (h *host) cgroup(rel, procs string) { h.write(filepath.Join(h.cg, rel, "cgroup.procs"), procs) }

func (h *host) process(pid, file, data string) { h.write(filepath.Join(h.proc, pid, file), data) }

func (h *host) resolver(pods PodLookup) *Resolver {
	return NewResolver(Options{ProcRoot: h.proc, EtcRoot: h.etc, CgroupRoot: h.cg, LibvirtDirs: h.libvirtDir, Pods: pods})
}

func checkResolve(t *testing.T, r *Resolver, path string, want ident.Identity) {
	t.Helper()
	if got := r.Resolve(path); got != want {
		t.Errorf("Resolve(%q)\n got %+v\nwant %+v", path, got, want)
	}
}

func TestResolveSlurm(t *testing.T) {
	h := newHost(t, "systemd")
	job := "/system.slice/slurmstepd.scope/job_77"
	h.cgroup(job+"/step_0/user/task_0", "4101\n4102\n")
	h.cgroup(job+"/step_0/slurm", "4100\n")
	h.process("4101", "status", "Name:\tpython3\nUmask:\t0022\nState:\tR (running)\nTgid:\t4101\nPid:\t4101\nPPid:\t4100\nUid:\t2001\t2001\t2001\t2001\nGid:\t2001\t2001\t2001\t2001\n")
	h.process("4100", "status", "Name:\tslurmstepd\nUid:\t0\t0\t0\t0\n")
	r := h.resolver(nil)

	checkResolve(t, r, "/slurm/uid_1000/job_4711/step_0/task_1",
		ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4711", UID: "1000", User: "alice", JobID: "4711", Step: "0", Task: "1"})
	// cgroup v2: the owner comes from the task's processes, also for the
	// stepd cgroup, whose process is root's.
	checkResolve(t, r, job+"/step_0/slurm",
		ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "77", Part: "stepd", UID: "2001", User: "bob", JobID: "77", Step: "0"})
	checkResolve(t, r, job+"/step_0/user/task_0",
		ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "77", UID: "2001", User: "bob", JobID: "77", Step: "0", Task: "0"})
	// Unknown uid: no user name, and kept incomplete.
	checkResolve(t, r, "/slurm/uid_4242/job_5/step_batch",
		ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "5", UID: "4242", JobID: "5", Step: "batch"})
}

func TestResolveLibvirtSystemd(t *testing.T) {
	h := newHost(t, "systemd")
	ghost := `/machine.slice/machine-qemu\x2d4\x2dghost.scope`
	h.cgroup(ghost+"/libvirt/emulator", "5001\n")
	h.write(filepath.Join(h.cg, ghost, "libvirt/vcpu0/cgroup.threads"), "5003\n")
	h.process("5001", "cmdline", "/usr/bin/qemu-system-x86_64\x00-name\x00guest=ghost,debug-threads=on\x00-S\x00-uuid\x0077d8e9f0-a1b2-4c3d-8e4f-5a6b7c8d9e0f\x00")
	r := h.resolver(nil)

	nova := ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "2a7d9e4b-1c3f-4a5b-8d6e-7f8091a2b3c4", Name: "db-primary",
		VMName: "instance-0000002a", VMUUID: "2a7d9e4b-1c3f-4a5b-8d6e-7f8091a2b3c4", DomainID: "3", Instance: "instance-0000002a",
		VMVCPUs: 2, VMMemoryKiB: 4 << 20}
	checkResolve(t, r, `/machine.slice/machine-qemu\x2d3\x2dinstance\x2d0000002a.scope`, nova)
	nova.Part = "vcpu1"
	checkResolve(t, r, `/machine.slice/machine-qemu\x2d3\x2dinstance\x2d0000002a.scope/libvirt/vcpu1`, nova)

	long := "analytics-cluster-worker-node-with-a-very-long-descriptive-name-08"
	checkResolve(t, r, `/machine.slice/machine-qemu\x2d6\x2danalytics\x2dcluster\x2dworker\x2dnode\x2dwith\x2da\x2dvery\x2dlong\x2ddescriptiv.scope/libvirt/emulator`,
		ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "e1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f7", Name: long, Part: "emulator",
			VMName: long, VMUUID: "e1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f7", DomainID: "6", VMVCPUs: 2, VMMemoryKiB: 4 << 20})
	checkResolve(t, r, `/machine.slice/machine-qemu\x2d7\x2dmyvm.test.scope`,
		ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "0f1e2d3c-4b5a-4968-8776-655443322110", Name: "my_vm.test",
			VMName: "my_vm.test", VMUUID: "0f1e2d3c-4b5a-4968-8776-655443322110", DomainID: "7", VMVCPUs: 2, VMMemoryKiB: 4 << 20})
	// No XML: no allocation known; the QEMU command line of the emulator's process, found from
	// a threaded vcpu cgroup whose thread procfs here does not know.
	checkResolve(t, r, ghost+"/libvirt/vcpu0",
		ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "77d8e9f0-a1b2-4c3d-8e4f-5a6b7c8d9e0f", Name: "ghost", Part: "vcpu0",
			VMName: "ghost", VMUUID: "77d8e9f0-a1b2-4c3d-8e4f-5a6b7c8d9e0f", DomainID: "4"})
	// Neither: path-derived ids only.
	checkResolve(t, r, `/machine.slice/machine-qemu\x2d9\x2dnowhere.scope`,
		ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "nowhere", VMName: "nowhere", DomainID: "9"})
	if err := r.LibvirtErr(); err == nil || !strings.Contains(err.Error(), "broken.xml") {
		t.Errorf("LibvirtErr = %v", err)
	}
}

func TestResolveLibvirtCgroupfs(t *testing.T) {
	h := newHost(t, "cgroupfs")
	r := h.resolver(nil)
	checkResolve(t, r, "/machine/qemu-2-db01.libvirt-qemu/vcpu0",
		ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "3b4c5d6e-7f80-4912-a3b4-c5d6e7f80912", Name: "db01", Part: "vcpu0",
			VMName: "db01", VMUUID: "3b4c5d6e-7f80-4912-a3b4-c5d6e7f80912", DomainID: "2", VMVCPUs: 2, VMMemoryKiB: 4 << 20})
	checkResolve(t, r, "/machine/db01.libvirt-qemu",
		ident.Identity{Kind: ident.KindVM, Manager: ident.ManagerLibvirt, ID: "3b4c5d6e-7f80-4912-a3b4-c5d6e7f80912", Name: "db01",
			VMName: "db01", VMUUID: "3b4c5d6e-7f80-4912-a3b4-c5d6e7f80912", VMVCPUs: 2, VMMemoryKiB: 4 << 20})
}

// kubeletClient serves the kube package's PodList fixture from a real HTTP
// server and returns a running client.
func kubeletClient(t *testing.T, up bool) *kube.Client {
	t.Helper()
	body, err := os.ReadFile("kube/testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
	t.Cleanup(srv.Close)
	if !up {
		srv.Close()
	}
	c, err := kube.New(kube.Config{URL: srv.URL + "/pods", Refresh: time.Hour, MinRefresh: 10 * time.Millisecond, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(5 * time.Second)
	for st := c.Status(); st.Refreshes == 0 && st.Errors == 0; st = c.Status() {
		if time.Now().After(deadline) {
			t.Fatal("no refresh")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c
}

const sandbox = "5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"

func TestResolveKubernetes(t *testing.T) {
	h := newHost(t, "systemd")
	pod := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice"
	h.cgroup(pod+"/cri-containerd-"+sandbox+".scope", "6001\n")
	h.process("6001", "comm", "pause\n")
	r := h.resolver(kubeletClient(t, true))

	checkResolve(t, r, pod+"/cri-containerd-"+cid+".scope",
		ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: cid, Name: "nginx", PodUID: uid, Pod: "web-0", Namespace: "shop", Container: "nginx", QoS: "burstable"})
	checkResolve(t, r, pod,
		ident.Identity{Kind: ident.KindPod, Manager: ident.ManagerKubernetes, ID: uid, Name: "web-0", PodUID: uid, Pod: "web-0", Namespace: "shop", QoS: "burstable"})
	checkResolve(t, r, pod+"/cri-containerd-"+sandbox+".scope",
		ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: sandbox, Name: ident.SandboxContainer, PodUID: uid, Pod: "web-0", Namespace: "shop", Container: ident.SandboxContainer, QoS: "burstable"})
	// cgroupfs driver: the runtime comes from the kubelet's container id.
	checkResolve(t, r, "/kubepods/burstable/pod"+uid+"/"+cid2,
		ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: cid2, Name: "exporter", PodUID: uid, Pod: "web-0", Namespace: "shop", Container: "exporter", QoS: "burstable"})
	// Static pod, CRI-O.
	crio := "b0c1d2e3f405162738495a6b7c8d9e0f11223344556677889900aabbccddee02"
	checkResolve(t, r, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+staticUID+".slice/crio-"+crio+".scope",
		ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerCRIO, ID: crio, Name: "kube-apiserver", PodUID: staticUID, Pod: "kube-apiserver-worker-1", Namespace: "kube-system", Container: "kube-apiserver", QoS: "burstable"})
	// A pod the kubelet does not list: path ids.
	other := "0a0b0c0d-1e1f-4a2b-8c3d-4e5f6a7b8c9d"
	checkResolve(t, r, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"+strings.ReplaceAll(other, "-", "_")+".slice",
		ident.Identity{Kind: ident.KindPod, Manager: ident.ManagerKubernetes, ID: other, PodUID: other, QoS: "besteffort"})
}

func TestResolveKubeletDown(t *testing.T) {
	h := newHost(t, "systemd")
	r := h.resolver(kubeletClient(t, false))
	path := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope"
	t0 := time.Now()
	checkResolve(t, r, path, ident.Identity{Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: cid, PodUID: uid, QoS: "burstable"})
	if d := time.Since(t0); d > 100*time.Millisecond {
		t.Errorf("Resolve took %v with the kubelet down", d)
	}
}

// TestResolveRetry: an incomplete identity is retried after its backoff,
// and a complete one is served from the cache.
func TestResolveRetry(t *testing.T) {
	tmp := t.TempDir()
	etc := filepath.Join(tmp, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	passwdFile := filepath.Join(etc, "passwd")
	if err := os.WriteFile(passwdFile, []byte("alice:x:1000:1000::/home/alice:/bin/bash\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewResolver(Options{EtcRoot: etc, ProcRoot: filepath.Join(tmp, "proc"), LibvirtDirs: []string{}})
	now := time.Unix(1_700_000_000, 0)
	r.now = func() time.Time { return now }
	const path = "/slurm/uid_4242/job_5/step_0"
	if got := r.Resolve(path).User; got != "" {
		t.Fatalf("User = %q before carol exists", got)
	}
	if err := os.WriteFile(passwdFile, []byte("alice:x:1000:1000::/home/alice:/bin/bash\ncarol:x:4242:4242::/home/carol:/bin/bash\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now = now.Add(minRetry / 2)
	if got := r.Resolve(path).User; got != "" {
		t.Fatalf("User = %q before the retry is due", got)
	}
	now = now.Add(minRetry)
	if got := r.Resolve(path).User; got != "carol" {
		t.Fatalf("User = %q after the retry, want carol", got)
	}
	// Complete now: a later passwd change is not looked at.
	if err := os.WriteFile(passwdFile, []byte("caroline:x:4242:4242::/home/carol:/bin/bash\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	if got := r.Resolve(path).User; got != "carol" {
		t.Fatalf("User = %q for a complete identity, want the cached carol", got)
	}
}

func TestSweep(t *testing.T) {
	r := NewResolver(Options{EtcRoot: "testdata/hosts/systemd/etc", LibvirtDirs: []string{}})
	a, b := "/system.slice/a.service", "/system.slice/b.service"
	r.Resolve(a)
	r.Resolve(b)
	if n := r.Sweep(); n != 0 {
		t.Errorf("first Sweep dropped %d", n)
	}
	r.Resolve(a)
	if n := r.Sweep(); n != 1 {
		t.Errorf("second Sweep dropped %d, want 1 (b)", n)
	}
	r.mu.RLock()
	_, hasA := r.cache[a]
	_, hasB := r.cache[b]
	r.mu.RUnlock()
	if !hasA || hasB {
		t.Errorf("after Sweep: a cached %v, b cached %v", hasA, hasB)
	}
}

func TestParsePasswd(t *testing.T) {
	got := parsePasswd([]byte("root:x:0:0:root:/root:/bin/bash\n# c\nbad\n:x:5:5::/:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/bash\nalias:x:1000:1000::/:/bin/sh\n"))
	want := map[string]string{"0": "root", "1000": "alice"}
	if len(got) != len(want) || got["0"] != "root" || got["1000"] != "alice" {
		t.Errorf("parsePasswd = %v, want %v", got, want)
	}
}

func TestLabelValues(t *testing.T) {
	h := newHost(t, "systemd")
	r := h.resolver(kubeletClient(t, true))
	for _, tc := range []struct {
		path  string
		level ident.Kind
		want  []string // nil: not at this level
	}{
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", ident.KindContainer,
			[]string{cid, "nginx", "web-0", "shop", ident.ManagerContainerd}},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", ident.KindPod,
			[]string{uid, "web-0", "shop", "burstable"}},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", ident.KindJob, nil},
		{"/system.slice/docker-" + cid + ".scope", ident.KindContainer, []string{cid, "", "", "", ident.ManagerDocker}},
		{`/machine.slice/machine-qemu\x2d3\x2dinstance\x2d0000002a.scope/libvirt/vcpu0`, ident.KindVM,
			[]string{"2a7d9e4b-1c3f-4a5b-8d6e-7f8091a2b3c4", "db-primary", "instance-0000002a"}},
		{"/slurm_n7/uid_1000/job_4711/step_0/task_1", ident.KindJob, []string{"4711", "alice", "1000", "n7", ""}},
		{`/system.slice/system-getty.slice/getty@tty1.service`, ident.KindSystemdUnit, []string{"getty@tty1.service", ident.ManagerSystemd}},
		{"/foo", ident.KindSystemdUnit, nil},
	} {
		got, ok := r.Resolve(tc.path).LabelValues(tc.level)
		if ok != (tc.want != nil) || strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("LabelValues(%s) of %s = %q, %v; want %q", tc.level, tc.path, got, ok, tc.want)
		}
		if ok && len(got) != len(ident.LabelNames(tc.level)) {
			t.Errorf("%s: %d values for %d names", tc.level, len(got), len(ident.LabelNames(tc.level)))
		}
	}
}

// BenchmarkResolve1000 resolves 1,000 cached paths, as the stats loop does
// every interval.
func BenchmarkResolve1000(b *testing.B) {
	r := NewResolver(Options{EtcRoot: "testdata/hosts/systemd/etc", LibvirtDirs: []string{}})
	paths := make([]string, 1000)
	for i := range paths {
		paths[i] = fmt.Sprintf("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%064x.scope", uidU, i)
		if i%2 == 1 {
			paths[i] = fmt.Sprintf("/slurm/uid_1000/job_%d/step_0/task_0", i)
		}
		r.Resolve(paths[i])
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range paths {
			r.Resolve(p)
		}
	}
}
