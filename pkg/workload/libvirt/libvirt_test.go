package libvirt

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

const systemdHost = "../testdata/hosts/systemd"

func hostDirs(root string) []string {
	return []string{filepath.Join(root, "run/libvirt/qemu"), filepath.Join(root, "etc/libvirt/qemu")}
}

func TestMachineName(t *testing.T) {
	for _, tc := range []struct {
		id     int
		name   string
		legacy bool
		want   string
	}{
		{1, "web01", false, "qemu-1-web01"},
		{7, "my_vm.test", false, "qemu-7-myvm.test"},
		{2, "-lead..dots--", false, "qemu-2-lead.dots"},
		{3, "a-_-b", false, "qemu-3-a-b"},
		{3, "a-_-b", true, "qemu-3-a--b"},
		{4, "ünïcode vm", false, "qemu-4-ncodevm"},
		{5, "analytics-cluster-worker-node-with-a-very-long-descriptive-name-07", false,
			"qemu-5-analytics-cluster-worker-node-with-a-very-long-descriptiv"},
		// The cut lands after a dash, which is then trimmed.
		{12, "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabc-tail", false,
			"qemu-12-abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabc"},
	} {
		if got := MachineName(tc.id, tc.name, tc.legacy); got != tc.want {
			t.Errorf("MachineName(%d, %q, %v) = %q, want %q", tc.id, tc.name, tc.legacy, got, tc.want)
		}
		if got := MachineName(tc.id, tc.name, tc.legacy); len(got) > maxMachineName {
			t.Errorf("MachineName(%d, %q) is %d bytes", tc.id, tc.name, len(got))
		}
	}
}

func TestParseCmdline(t *testing.T) {
	args := func(a ...string) []byte { return []byte(strings.Join(a, "\x00") + "\x00") }
	for _, tc := range []struct {
		name     string
		cmdline  []byte
		wantName string
		wantUUID string
	}{
		{"libvirt", args("/usr/bin/qemu-system-x86_64", "-name", "guest=web01,debug-threads=on", "-S",
			"-object", "secret,id=masterKey0,format=raw", "-uuid", "6c3f2a1e-8b7d-4c5e-9f0a-1b2c3d4e5f60", "-no-user-config"),
			"web01", "6c3f2a1e-8b7d-4c5e-9f0a-1b2c3d4e5f60"},
		{"escaped comma", args("qemu-kvm", "-name", "guest=a,,b,debug-threads=on"), "a,b", ""},
		{"old form", args("qemu-kvm", "-name", "web02,process=qemu:web02", "-uuid", "u"), "web02", "u"},
		{"double dash", args("qemu-kvm", "--name", "plain", "--uuid", "u2"), "plain", "u2"},
		{"none", args("/usr/sbin/sshd", "-D"), "", ""},
		{"trailing -name", args("qemu-kvm", "-name"), "", ""},
		{"empty", nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, u := ParseCmdline(tc.cmdline)
			if n != tc.wantName || u != tc.wantUUID {
				t.Errorf("ParseCmdline = %q, %q; want %q, %q", n, u, tc.wantName, tc.wantUUID)
			}
		})
	}
}

func TestCatalogFind(t *testing.T) {
	c := NewCatalog(hostDirs(systemdHost))
	run := func(f string) string { return filepath.Join(systemdHost, "run/libvirt/qemu", f) }
	etc := func(f string) string { return filepath.Join(systemdHost, "etc/libvirt/qemu", f) }
	long := "analytics-cluster-worker-node-with-a-very-long-descriptive-name-0"
	for _, tc := range []struct {
		name   string
		id     int
		path   string // the name as the cgroup path has it
		want   Domain
		wantOK bool
	}{
		{"status file by id", 1, "web01", Domain{Name: "web01", UUID: "6c3f2a1e-8b7d-4c5e-9f0a-1b2c3d4e5f60", ID: 1, File: run("web01.xml")}, true},
		{"openstack", 3, "instance-0000002a", Domain{Name: "instance-0000002a", UUID: "2a7d9e4b-1c3f-4a5b-8d6e-7f8091a2b3c4", ID: 3, DisplayName: "db-primary", File: run("instance-0000002a.xml")}, true},
		{"truncated, id 5", 5, "analytics-cluster-worker-node-with-a-very-long-descriptiv", Domain{Name: long + "7", UUID: "d1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f6", ID: 5, File: run(long + "7.xml")}, true},
		{"truncated, id 6", 6, "analytics-cluster-worker-node-with-a-very-long-descriptiv", Domain{Name: long + "8", UUID: "e1e2f3a4-b5c6-4d7e-8f90-a1b2c3d4e5f7", ID: 6, File: run(long + "8.xml")}, true},
		{"sanitised", 7, "myvm.test", Domain{Name: "my_vm.test", UUID: "0f1e2d3c-4b5a-4968-8776-655443322110", ID: 7, File: run("my_vm.test.xml")}, true},
		{"definition only", 8, "builder", Domain{Name: "builder", UUID: "9b8a7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d", File: etc("builder.xml")}, true},
		{"old layout, no id", 0, "web01", Domain{Name: "web01", UUID: "6c3f2a1e-8b7d-4c5e-9f0a-1b2c3d4e5f60", ID: 1, File: run("web01.xml")}, true},
		{"stale id", 2, "web01", Domain{Name: "web01", UUID: "6c3f2a1e-8b7d-4c5e-9f0a-1b2c3d4e5f60", File: etc("web01.xml")}, true},
		{"unknown", 4, "ghost", Domain{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantOK {
				// Every domain of the test host allocates 2 vCPUs
				// and 4 GiB.
				tc.want.VCPUs, tc.want.MemoryKiB = 2, 4<<20
			}
			got, ok := c.Find(tc.id, tc.path)
			if ok != tc.wantOK || got != tc.want {
				t.Errorf("Find(%d, %q) = %+v, %v; want %+v, %v", tc.id, tc.path, got, ok, tc.want, tc.wantOK)
			}
		})
	}
	err := c.Err()
	if err == nil || !strings.Contains(err.Error(), "broken.xml: parse <domain>") {
		t.Errorf("Err() = %v, want the broken file named", err)
	}
}

// TestCatalogInvalidation renames a file in place of another, as libvirt
// does, and checks that the next Find sees it, and that an unchanged
// directory is not re-read.
func TestCatalogInvalidation(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(systemdHost, "run/libvirt/qemu/web01.xml"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(data string) {
		t.Helper()
		tmp := filepath.Join(dir, "web01.xml.new")
		if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "web01.xml")); err != nil {
			t.Fatal(err)
		}
	}
	write(string(src))
	c := NewCatalog([]string{dir})
	if d, ok := c.Find(1, "web01"); !ok || d.ID != 1 {
		t.Fatalf("Find before restart = %+v, %v", d, ok)
	}
	// The domain restarts with id 4: libvirt rewrites the status file.
	write(strings.Replace(string(src), "type='kvm' id='1'", "type='kvm' id='4'", 1))
	// Make sure the directory's mtime moves even on coarse file systems.
	future := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(dir, future, future); err != nil {
		t.Fatal(err)
	}
	if d, ok := c.Find(4, "web01"); !ok || d.ID != 4 {
		t.Fatalf("Find after restart = %+v, %v", d, ok)
	}
	if _, ok := c.Find(1, "web01"); ok {
		t.Errorf("old id still found")
	}
	// Removing the file removes the domain.
	if err := os.Remove(filepath.Join(dir, "web01.xml")); err != nil {
		t.Fatal(err)
	}
	future = future.Add(2 * time.Second)
	if err := os.Chtimes(dir, future, future); err != nil {
		t.Fatal(err)
	}
	if d, ok := c.Find(4, "web01"); ok {
		t.Errorf("removed domain still found: %+v", d)
	}
}

func TestParseID(t *testing.T) {
	for in, want := range map[string]int{"": 0, "12": 12, "-3": 0, "x": 0} {
		if got := ParseID(in); got != want {
			t.Errorf("ParseID(%q) = %d, want %d", in, got, want)
		}
	}
}

func FuzzParseCmdline(f *testing.F) {
	f.Add([]byte("qemu\x00-name\x00guest=a,,b,debug-threads=on\x00-uuid\x00u\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, u := ParseCmdline(b)
		if !strings.Contains(string(b), u) {
			t.Fatalf("uuid %q not in input", u)
		}
		if !strings.Contains(strings.ReplaceAll(string(b), ",,", ","), n) && !strings.Contains(string(b), n) {
			t.Fatalf("name %q not in input", n)
		}
	})
}

func TestParseDomainDevices(t *testing.T) {
	x := `<domain type='kvm'><name>g</name><uuid>U</uuid><devices>
<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0001' bus='0x3b' slot='0x1f' function='0x7'/></source></hostdev>
<hostdev mode='subsystem' type='pci'><source><address bus='0x5e' slot='0x00' function='0x0'/></source></hostdev>
<hostdev mode='subsystem' type='pci'><source><address bus='zz' slot='0x00' function='0x0'/></source></hostdev>
<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='C2177883-F1BB-47F0-914D-32A22E3A8804'/></source></hostdev>
<hostdev mode='subsystem' type='usb'><source><vendor id='0x1'/></source></hostdev>
</devices></domain>`
	d, devs, err := ParseDomainDevices(strings.NewReader(x))
	if err != nil || d.Name != "g" {
		t.Fatal(d, err)
	}
	want := Devices{Hostdevs: []string{"0001:3b:1f.7", "0000:5e:00.0"}, Mdevs: []string{"c2177883-f1bb-47f0-914d-32a22e3a8804"}}
	if !reflect.DeepEqual(devs, want) {
		t.Errorf("got %+v", devs)
	}
}

// A domain's allocation is read from <vcpu> and <memory> in any of
// libvirt's units; an absent or implausible value is 0 (not known).
func TestDomainAllocation(t *testing.T) {
	for _, tc := range []struct {
		xml   string
		vcpus int
		kib   uint64
	}{
		{`<domain><name>a</name><vcpu placement='static'>4</vcpu><memory unit='KiB'>8388608</memory></domain>`, 4, 8388608},
		{`<domain><name>a</name><vcpu>2</vcpu><memory unit='GiB'>24</memory></domain>`, 2, 24 << 20},
		{`<domain><name>a</name><memory>1024</memory></domain>`, 0, 1024},
		{`<domain><name>a</name><vcpu>0</vcpu><memory unit='parsecs'>3</memory></domain>`, 0, 0},
		{`<domain><name>a</name><vcpu>x</vcpu><memory unit='MB'>1000</memory></domain>`, 0, 976562},
	} {
		d, err := parseDomainInto(strings.NewReader(tc.xml), nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.VCPUs != tc.vcpus || d.MemoryKiB != tc.kib {
			t.Errorf("%s: vcpus %d, memory %d KiB; want %d, %d", tc.xml, d.VCPUs, d.MemoryKiB, tc.vcpus, tc.kib)
		}
	}
}

// FindCID maps a vsock context id to the running domain holding it: the
// id libvirt assigned (auto) as its status file records it, or a fixed
// one; a stopped domain's definition naming the same id does not count,
// and reserved ids name no guest.
func TestCatalogFindCID(t *testing.T) {
	root := t.TempDir()
	run, etc := filepath.Join(root, "run"), filepath.Join(root, "etc")
	for _, d := range []string{run, etc} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	status := func(id int, name, uuid, vsock string) string {
		return `<domstatus state='running' pid='42'><domain type='kvm' id='` + strconv.Itoa(id) + `'><name>` + name +
			`</name><uuid>` + uuid + `</uuid><devices>` + vsock + `</devices></domain></domstatus>`
	}
	files := map[string]string{
		filepath.Join(run, "a.xml"):   status(1, "a", "AAAAAAAA-0000-4000-8000-000000000001", `<vsock model='virtio'><cid auto='yes' address='5'/></vsock>`),
		filepath.Join(run, "b.xml"):   status(2, "b", "bbbbbbbb-0000-4000-8000-000000000002", `<vsock model='virtio'><cid auto='no' address='0x7'/></vsock>`),
		filepath.Join(run, "c.xml"):   status(3, "c", "cccccccc-0000-4000-8000-000000000003", `<vsock model='virtio'><cid auto='no' address='2'/></vsock>`),
		filepath.Join(run, "n.xml"):   status(4, "n", "dddddddd-0000-4000-8000-000000000004", ``),
		filepath.Join(etc, "old.xml"): `<domain type='kvm'><name>old</name><uuid>eeeeeeee-0000-4000-8000-000000000005</uuid><devices><vsock model='virtio'><cid auto='no' address='9'/></vsock></devices></domain>`,
	}
	for p, x := range files {
		if err := os.WriteFile(p, []byte(x), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := NewCatalog([]string{run, etc})
	for _, tc := range []struct {
		cid  uint32
		want string // uuid, "" for none
	}{
		{5, "aaaaaaaa-0000-4000-8000-000000000001"},
		{7, "bbbbbbbb-0000-4000-8000-000000000002"},
		{2, ""}, // the host's id: no guest has it
		{9, ""}, // only a stopped domain's definition names it
		{0, ""},
		{1<<32 - 1, ""},
		{6, ""},
	} {
		d, ok := c.FindCID(tc.cid)
		if ok != (tc.want != "") || d.UUID != tc.want {
			t.Errorf("FindCID(%d) = %q, %v; want %q", tc.cid, d.UUID, ok, tc.want)
		}
	}
}
