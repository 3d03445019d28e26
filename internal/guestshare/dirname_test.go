package guestshare

import (
	"strconv"
	"syscall"

	"github.com/wattrace/wattrace/internal/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/power/hostshare"
	"github.com/wattrace/wattrace/pkg/reading"
)

// vmSnap is a snapshot at second sec of VMs given as {uuid, name, joules}.
func vmSnap(sec int, vms ...[3]any) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Time: time.Unix(int64(1000+sec), 0),
		Zones: []snapshot.Zone{{ZoneID: reading.ZoneID{Name: "package", Socket: 0}, Source: "rapl"}}}
	for _, v := range vms {
		s.Workloads = append(s.Workloads, snapshot.Workload{Level: "vm", Labels: []string{v[0].(string), v[1].(string), ""},
			Energy: snapshot.Energy{}.Add(snapshot.ZoneSeries{Zone: "package", Source: "rapl"}, v[2].(float64), 0)})
	}
	return s
}

// A domain without a uuid whose name is spelled like another domain's
// uuid writes its own directory, never the other's.
func TestWriterNameCannotTakeAnotherUUID(t *testing.T) {
	root := t.TempDir()
	w := newWriter(t, root)
	lower := strings.ToLower(uuid)
	if err := w.Write(vmSnap(1, [3]any{uuid, "web01", 10.0}, [3]any{"", lower, 999.0})); err != nil {
		t.Fatal(err)
	}
	owner := filepath.Join(root, "uuid-"+lower)
	if j := fileJ(t, owner); j != 10 {
		t.Errorf("the uuid's share holds %v J, want its own 10", j)
	}
	if m, err := hostshare.ReadMeta(owner); err != nil || m.Domain.Name != "web01" {
		t.Errorf("the uuid's meta %+v, %v", m, err)
	}
	if j := fileJ(t, filepath.Join(root, "name-"+lower)); j != 999 {
		t.Errorf("the named domain's share holds %v J, want 999", j)
	}
	if got := DirName("", "../x"); got != "" {
		t.Errorf("unsafe name gives %q", got)
	}
}

// A share written under the old unprefixed name moves to the prefixed
// one, its counters and epoch continuing, with a link at the old name for
// XML that still names it; an old directory whose metadata names another
// domain stays where it is.
func TestWriterMigratesUnprefixedShare(t *testing.T) {
	root := t.TempDir()
	lower := strings.ToLower(uuid)
	old := filepath.Join(root, lower)
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	meta := &hostshare.Meta{Version: hostshare.Version, Domain: hostshare.Domain{Name: "web01", UUID: uuid}, Epoch: "e1",
		Zones: []hostshare.Zone{{Name: "package", Method: "measured"}}, Updated: time.Unix(900, 0), Seq: 4}
	if err := hostshare.Write(old, meta, map[string]float64{"package": 100}); err != nil {
		t.Fatal(err)
	}
	// An old directory a uuid-less domain named like a uuid wrote.
	const other = "0f0f0f0f-0000-4000-8000-000000000000"
	squat := filepath.Join(root, other)
	if err := os.Mkdir(squat, 0o755); err != nil {
		t.Fatal(err)
	}
	bad := &hostshare.Meta{Version: hostshare.Version, Domain: hostshare.Domain{Name: other}, Epoch: "e2",
		Zones: []hostshare.Zone{{Name: "package", Method: "measured"}}, Updated: time.Unix(900, 0), Seq: 1}
	if err := hostshare.Write(squat, bad, map[string]float64{"package": 5000}); err != nil {
		t.Fatal(err)
	}

	w := newWriter(t, root)
	if err := w.Write(vmSnap(1, [3]any{uuid, "web01", 7.0}, [3]any{other, "db", 3.0})); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "uuid-"+lower)
	if j := fileJ(t, dir); j != 107 {
		t.Errorf("moved share holds %v J, want 107 (100 continued + 7)", j)
	}
	if m, _ := hostshare.ReadMeta(dir); m == nil || m.Epoch != "e1" || m.Seq != 5 {
		t.Errorf("moved share's meta %+v: want epoch e1, seq 5", m)
	}
	if target, err := os.Readlink(old); err != nil || target != "uuid-"+lower {
		t.Errorf("old name: link to %q, %v; want uuid-%s", target, err, lower)
	}
	if j := fileJ(t, old); j != 107 {
		t.Errorf("through the old name: %v J, want 107", j)
	}
	// The squatter's directory is not the uuid's: that domain starts afresh.
	if j := fileJ(t, filepath.Join(root, "uuid-"+other)); j != 3 {
		t.Errorf("other domain's share %v J, want 3 (not the squatter's 5000)", j)
	}
	if fi, err := os.Lstat(squat); err != nil || !fi.IsDir() {
		t.Errorf("the squatter's old directory moved: %v", err)
	}
}

// With a group, the domain's directory is 0750 and its files 0640, all in
// that group, an existing directory included; without, 0755 and 0644.
func TestWriterGroupMode(t *testing.T) {
	gid := -1
	if os.Geteuid() == 0 {
		gid = 4242 // root may give files any group
	} else {
		groups, _ := os.Getgroups()
		for _, g := range groups {
			if g != os.Getgid() {
				gid = g
				break
			}
		}
	}
	if gid < 0 {
		testenv.Need(t, "root, or a supplementary group to give the files")
	}
	root := t.TempDir()
	lower := strings.ToLower(uuid)
	dir := filepath.Join(root, "uuid-"+lower)
	if err := os.Mkdir(dir, 0o755); err != nil { // made by hand before the domain started
		t.Fatal(err)
	}
	w, err := New(Config{Dir: root, Interval: time.Second, Group: strconv.Itoa(gid), Host: "hv1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Write(snap(1, 5, 0)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, hostshare.MetaFile), filepath.Join(dir, hostshare.ZoneFile("package"))} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o640)
		if p == dir {
			want = 0o750
		}
		if fi.Mode().Perm() != want || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
			t.Errorf("%s: %v gid %d, want %v gid %d", p, fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid, want, gid)
		}
	}
	if _, err := New(Config{Dir: t.TempDir(), Interval: time.Second, Group: "no-such-group-wattrace"}); err == nil ||
		!strings.Contains(err.Error(), "guests.share.group") {
		t.Errorf("unknown group: %v", err)
	}

	root = t.TempDir()
	w2 := newWriter(t, root)
	if err := w2.Write(snap(1, 5, 0)); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(root, "uuid-"+lower)
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
		t.Errorf("default directory mode %v", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(filepath.Join(dir, hostshare.MetaFile)); fi.Mode().Perm() != 0o644 {
		t.Errorf("default file mode %v", fi.Mode().Perm())
	}
}
