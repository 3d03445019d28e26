package alloc

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/wattrace/wattrace/pkg/reading"
)

var devs = []reading.GPUDevice{
	{Index: 0, UUID: "GPU-aaaa", PCIBusID: "0000:07:00.0", Vendor: reading.VendorNVIDIA},
	{Index: 1, UUID: "GPU-bbbb", PCIBusID: "0000:0f:00.0", Vendor: reading.VendorNVIDIA},
	{Index: 2, PCIBusID: "0000:03:00.0", Vendor: reading.VendorAMD},
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func environ(kv ...string) string { return strings.Join(kv, "\x00") + "\x00" }

func TestParseOrderMap(t *testing.T) {
	m, err := ParseOrderMap("0:1,1:0.3, 2:0.4")
	if err != nil || !reflect.DeepEqual(m, OrderMap{0: "1", 1: "0.3", 2: "0.4"}) {
		t.Fatal(m, err)
	}
	for _, bad := range []string{"0:1,0:2", "x:1", "0:a", "0=1", "-1:0"} {
		if _, err := ParseOrderMap(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Acceptance: Slurm jobs' environ maps to devices through the order map,
// MIG instances included; a job's many processes count once; a process
// without Slurm variables holds nothing.
func TestSlurmEnviron(t *testing.T) {
	proc := t.TempDir()
	write(t, filepath.Join(proc, "100", "environ"), environ("PATH=/bin", "SLURM_JOB_ID=4242", "SLURM_JOB_GPUS=0,2", "CUDA_VISIBLE_DEVICES=0,1"))
	write(t, filepath.Join(proc, "101", "environ"), environ("SLURM_JOB_ID=4242", "SLURM_JOB_GPUS=0,2"))
	write(t, filepath.Join(proc, "200", "environ"), environ("SLURM_JOB_ID=77", "SLURM_JOB_GPUS=0,1", "SLURM_STEP_GPUS=1"))
	write(t, filepath.Join(proc, "300", "environ"), environ("SLURM_JOB_ID=9", "CUDA_VISIBLE_DEVICES=GPU-bbbb"))
	write(t, filepath.Join(proc, "400", "environ"), environ("HOME=/root"))
	om, _ := ParseOrderMap("0:1,1:0.3,2:0.4")
	s := &Slurm{ProcRoot: proc, Order: om}
	got, err := s.Allocations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Allocation{
		{Device: Ref{Index: "0.4"}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: "4242"}},
		{Device: Ref{Index: "1"}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: "4242"}},
		{Device: Ref{Index: "0.3"}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: "77"}},
		{Device: Ref{UUID: "GPU-bbbb"}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: "9"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	r := Resolve(devs, got, nil)
	if r[Key{Device: "GPU-bbbb"}].Holder.JobID != "4242" || r[Key{Device: "GPU-aaaa", Instance: "0.4"}].Holder.JobID != "4242" ||
		r[Key{Device: "GPU-aaaa", Instance: "0.3"}].Holder.JobID != "77" || len(r) != 3 {
		t.Errorf("resolved %+v", r)
	}
	// A process that exits is dropped from the cache.
	os.RemoveAll(filepath.Join(proc, "300"))
	got, _ = s.Allocations(context.Background())
	if len(got) != 3 || len(s.cache) != 4 {
		t.Errorf("after exit: %+v, cache %d", got, len(s.cache))
	}
}

type kubelet struct {
	podresources.UnimplementedPodResourcesListerServer
	resp *podresources.ListPodResourcesResponse
}

func (k *kubelet) List(context.Context, *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	return k.resp, nil
}

// Acceptance: a real gRPC server speaking the kubelet's v1 pod-resources
// API on a unix socket drives the pod allocations: NVIDIA UUIDs (with a
// time-slicing replica suffix), an AMD PCI address, a MIG UUID, and a
// non-GPU resource ignored.
func TestKubeletPodResources(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresources.RegisterPodResourcesListerServer(srv, &kubelet{resp: &podresources.ListPodResourcesResponse{
		PodResources: []*podresources.PodResources{
			{Name: "train-0", Namespace: "ml", Containers: []*podresources.ContainerResources{
				{Name: "trainer", Devices: []*podresources.ContainerDevices{
					{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-aaaa::0"}},
					{ResourceName: "example.com/nic", DeviceIds: []string{"0000:0f:00.0"}},
				}},
			}},
			{Name: "infer", Namespace: "web", Containers: []*podresources.ContainerResources{
				{Name: "srv", Devices: []*podresources.ContainerDevices{
					{ResourceName: "amd.com/gpu", DeviceIds: []string{"0000:03:00.0"}},
					{ResourceName: "nvidia.com/mig-1g.5gb", DeviceIds: []string{"MIG-cccc"}},
				}},
			}},
		}}})
	go srv.Serve(l)
	defer srv.Stop()

	k, err := NewKubelet(sock, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	got, err := k.Allocations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%+v", got)
	}
	r := Resolve(devs, got, map[string]string{"MIG-cccc": "1.5"})
	train := r[Key{Device: "GPU-aaaa"}].Holder
	amd := r[Key{Device: "0000:03:00.0"}].Holder
	mig := r[Key{Device: "GPU-bbbb", Instance: "1.5"}].Holder
	if train != (reading.Holder{Kind: reading.HolderPod, Namespace: "ml", Pod: "train-0", Container: "trainer"}) ||
		amd != (reading.Holder{Kind: reading.HolderPod, Namespace: "web", Pod: "infer", Container: "srv"}) || mig.Pod != "infer" || len(r) != 3 {
		t.Errorf("resolved %+v", r)
	}
	// The kubelet gone: an error, not a hang.
	srv.Stop()
	if _, err := k.Allocations(context.Background()); err == nil {
		t.Error("no error without a kubelet")
	}
}

const domstatus = `<domstatus state='running' reason='booted' pid='4242'>
  <domain type='kvm' id='3'>
    <name>gpu-vm</name>
    <uuid>6F2A0E8C-1111-2222-3333-444455556666</uuid>
    <devices>
      <disk type='file' device='disk'><source file='/var/lib/libvirt/images/a.qcow2'/></disk>
      <hostdev mode='subsystem' type='pci' managed='yes'>
        <driver name='vfio'/>
        <source><address domain='0x0000' bus='0x0f' slot='0x00' function='0x0'/></source>
        <address type='pci' domain='0x0000' bus='0x06' slot='0x00' function='0x0'/>
      </hostdev>
      <hostdev mode='subsystem' type='mdev' model='vfio-pci'>
        <source><address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/></source>
      </hostdev>
    </devices>
  </domain>
</domstatus>`

// Acceptance: a libvirt domain's PCI hostdev maps the whole device to the
// VM; its mdev maps the parent device (a vGPU slice) without Whole.
func TestLibvirtHostdev(t *testing.T) {
	run, sys := t.TempDir(), t.TempDir()
	write(t, filepath.Join(run, "gpu-vm.xml"), domstatus)
	write(t, filepath.Join(run, "broken.xml"), "<domain>")
	parent := filepath.Join(sys, "devices", "pci0000:00", "0000:07:00.0", "c2177883-f1bb-47f0-914d-32a22e3a8804")
	os.MkdirAll(parent, 0o755)
	os.MkdirAll(filepath.Join(sys, "bus", "mdev", "devices"), 0o755)
	os.Symlink(parent, filepath.Join(sys, "bus", "mdev", "devices", "c2177883-f1bb-47f0-914d-32a22e3a8804"))
	l := &Libvirt{RunDir: run, SysfsRoot: sys}
	got, err := l.Allocations(context.Background())
	if err == nil || !strings.Contains(err.Error(), "broken.xml") {
		t.Errorf("broken file not reported: %v", err)
	}
	vm := reading.Holder{Kind: reading.HolderVM, VMName: "gpu-vm", VMUUID: "6f2a0e8c-1111-2222-3333-444455556666"}
	want := []Allocation{
		{Device: Ref{PCI: "0000:0f:00.0"}, Holder: vm, Whole: true},
		{Device: Ref{PCI: "0000:07:00.0"}, Holder: vm},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
	r := Resolve(devs, got, nil)
	if a := r[Key{Device: "GPU-bbbb"}]; !a.Whole || a.Holder != vm {
		t.Errorf("passthrough: %+v", r)
	}
	if a := r[Key{Device: "GPU-aaaa"}]; a.Whole || a.Holder != vm {
		t.Errorf("mdev: %+v", r)
	}
}

// The first claim wins: sources are passed in precedence order.
func TestResolvePrecedence(t *testing.T) {
	vm := Allocation{Device: Ref{PCI: "0000:07:00.0"}, Holder: reading.Holder{Kind: reading.HolderVM, VMName: "a"}, Whole: true}
	job := Allocation{Device: Ref{Index: "0"}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: "1"}}
	ghost := Allocation{Device: Ref{UUID: "GPU-zzzz"}, Holder: reading.Holder{Kind: reading.HolderPod}}
	r := Resolve(devs, []Allocation{vm, job, ghost}, nil)
	if len(r) != 1 || r[Key{Device: "GPU-aaaa"}].Holder.VMName != "a" {
		t.Errorf("%+v", r)
	}
}

// A PID reused between two scans is another process: the new job's
// process is read, not the cached allocations of the one that had its
// PID before.
func TestSlurmPIDReused(t *testing.T) {
	proc := t.TempDir()
	stat := func(start int) string {
		return fmt.Sprintf("500 (my (job)) S 1 500 500 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", start)
	}
	write(t, filepath.Join(proc, "500", "stat"), stat(1000))
	write(t, filepath.Join(proc, "500", "environ"), environ("SLURM_JOB_ID=1", "SLURM_JOB_GPUS=0"))
	s := &Slurm{ProcRoot: proc}
	if got, _ := s.Allocations(context.Background()); len(got) != 1 || got[0].Holder.JobID != "1" {
		t.Fatalf("first scan %+v", got)
	}
	// Job 1's process ends; job 2's gets PID 500.
	write(t, filepath.Join(proc, "500", "stat"), stat(2000))
	write(t, filepath.Join(proc, "500", "environ"), environ("SLURM_JOB_ID=2", "SLURM_JOB_GPUS=1"))
	got, _ := s.Allocations(context.Background())
	if len(got) != 1 || got[0].Holder.JobID != "2" || got[0].Device.Index != "1" {
		t.Errorf("after the PID was reused: %+v, want job 2 on GPU 1", got)
	}
	if len(s.cache) != 1 {
		t.Errorf("cache holds %d processes, want the live one", len(s.cache))
	}
}
