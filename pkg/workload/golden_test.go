package workload

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/workload/workloadtest"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

var update = flag.Bool("update", false, "rewrite testdata/parse.golden from the parser")

// resolverPaths are the paths the resolver's tests resolve (resolver_test.go,
// sluid_test.go, pbs_test.go), beyond those of the parse tables.
var resolverPaths = []string{
	"/slurm/uid_4242/job_5/step_batch",
	"/slurm/uid_4242/job_5/step_0",
	"/system.slice/slurmstepd.scope/job_77/step_0/slurm",
	"/system.slice/slurmstepd.scope/job_77/step_0/user/task_0",
	`/machine.slice/machine-qemu\x2d3\x2dinstance\x2d0000002a.scope`,
	`/machine.slice/machine-qemu\x2d3\x2dinstance\x2d0000002a.scope/libvirt/vcpu1`,
	`/machine.slice/machine-qemu\x2d6\x2danalytics\x2dcluster\x2dworker\x2dnode\x2dwith\x2da\x2dvery\x2dlong\x2ddescriptiv.scope/libvirt/emulator`,
	`/machine.slice/machine-qemu\x2d7\x2dmyvm.test.scope`,
	`/machine.slice/machine-qemu\x2d4\x2dghost.scope/libvirt/vcpu0`,
	`/machine.slice/machine-qemu\x2d9\x2dnowhere.scope`,
	"/machine/qemu-2-db01.libvirt-qemu/vcpu0",
	"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + sandbox + ".scope",
	"/kubepods/burstable/pod" + uid + "/" + cid2,
	"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a0b0c0d_1e1f_4a2b_8c3d_4e5f6a7b8c9d.slice",
	"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticUID + ".slice/crio-b0c1d2e3f405162738495a6b7c8d9e0f11223344556677889900aabbccddee02.scope",
	"/system.slice/a.service", "/system.slice/b.service",
	"/slurm_n7/uid_1000/job_4711/step_0/task_1",
	"/system.slice/system-getty.slice/getty@tty1.service",
	"/foo",
	"/system.slice/slurmstepd.scope/sEKNKTV3WPV501/step_batch/user/task_0",
	"/system.slice/slurmstepd.scope/sEKNKTV3WPV502/step_0/slurm",
	"/system.slice/slurmstepd.scope/sEKNKTV3WPV502/step_0/user/task_0",
	"/pbs_jobs.service/jobid/7.srv", "/pbs_jobs.service/jobid/7.srv/sub", "/pbs_jobs.service/jobid/8.srv",
	"/system.slice/slurmstepd.scope/jobid7/step_0/user/task_0",
}

// oddPaths are no layout's: names several layouts' patterns match, and
// components in places their layout never puts them. They pin which rule
// wins where rules overlap, and what a component does out of its place.
var oddPaths = []string{
	"/system.slice/kubepods",
	"/system.slice/kubepods/burstable/pod" + uid,
	"/kubelet.slice/kubepods/besteffort/pod" + uid + "/" + cid,
	"/foo.service/slurm/uid_1000/job_1/step_0/task_0",
	"/foo.service/slurm",
	"/foo/slurm/uid_1000",
	"/slurm_x-kubepods-pod" + uidU + ".slice",
	"/slurm_x.libvirt-qemu",
	"/slurm_docker",
	`/machine-qemu\x2dfoo_slurmstepd.scope/job_3`,
	"/system.slice/docker-" + cid + ".scope/slurm/uid_1/job_2",
	"/system.slice/docker-" + cid + ".scope/slurmstepd.scope/job_2",
	"/slurm/uid_1000/job_4711/step_0/docker-" + cid + ".scope/x",
	"/slurm/uid_1000/job_4711/step_0/user/task_0/slurm",
	"/slurm/uid_1000/job_4711/job_4712/step_0",
	"/slurm/job_4711/uid_1000",
	"/slurm/slurm_n2/uid_1/job_3",
	"/pbs_jobs.service/jobs/1.x.libvirt-qemu",
	"/pbs_jobs.service/jobid/12345.pbs01/pbs_jobs.service/jobid/2.srv",
	"/system.slice/pbs_jobs.service/jobid/12345.pbs01",
	"/kubepods/burstable/pod" + uid + "/docker/" + cid,
	"/kubepods/pod" + uid + "/" + cid + "/" + cid2,
	"/kubepods/burstable/besteffort/pod" + uid,
	"/kubepods.slice/kubepods-burstable.slice/kubepods.slice/kubepods-pod" + uidU + ".slice",
	"/kubepods/burstable/kubepods-pod" + uidU + ".slice",
	"/kubepods.slice/kubepods-besteffort-pod" + uidU + ".slice/kubepods-burstable.slice",
	"/kubepods.slice/kubepods-besteffort-pod" + uidU + ".slice/kubepods",
	"/docker/docker/" + cid,
	"/docker/" + cid + "/docker",
	"/system.slice/docker",
	`/machine.slice/machine-qemu\x2d1\x2dweb01.scope/libvirt/libvirt/vcpu0`,
	`/machine.slice/machine-qemu\x2d1\x2dweb01.scope/machine-qemu\x2dinner.scope`,
	`/machine.slice/machine-qemu\x2d1\x2d.scope`,
	`/machine.slice/machine-qemu\x2d12.scope`,
	"/machine/qemu-2-db01.libvirt-qemu/qemu-3-inner.libvirt-qemu",
	"/machine/.libvirt-qemu",
	"/machine/qemu-x-db01.libvirt-qemu",
	"/user.slice/user-1000.slice/session-3.scope/user@2000.service",
	"/user.slice/user-x.slice",
	"/system.slice/crio-conmon-" + cid + ".scope/x/y",
	"/system.slice/crio-conmon-" + cid + ".scope/crio-" + cid2 + ".scope",
	"/system.slice/libpod-" + cid + ".scope/kubepods.slice",
	"/libpod-conmon-" + cid,
	"/system.slice/slurmstepd.scope/job_4711/step_0/user/user/task_0",
	"/system.slice/slurmstepd.scope/" + "sEKNKTV3WPV500" + "/job_1",
	"/system.slice/slurmstepd.scope/system/job_1",
	"/a/b/c/d/e/f/g/h",
	"///",
}

// fixturePaths are every path of the package's fixtures: the parse tables,
// the resolver's tests, workloadtest's fixture nodes, the fuzz seeds and
// corpus, the odd paths, and every ancestor of each, sorted.
func fixturePaths(t testing.TB) []string {
	seen := map[string]bool{}
	var tables [][]parseCase
	tables = append(tables, containerCases(), kubernetesCases(), slurmCases(), libvirtCases(), unitCases(), plainCases(), sluidCases(), pbsCases())
	var paths []string
	for _, cs := range tables {
		for _, c := range cs {
			paths = append(paths, c.path)
		}
	}
	paths = append(paths, resolverPaths...)
	paths = append(paths, oddPaths...)
	paths = append(paths, fuzzSeeds()...)
	for _, n := range workloadtest.Nodes() {
		for _, c := range n.Cgroups {
			paths = append(paths, c.Path)
		}
	}
	corpus, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzParse", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range corpus {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if q, ok := strings.CutPrefix(line, "string("); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(q, ")"))
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				paths = append(paths, s)
			}
		}
	}
	var out []string
	for _, p := range paths {
		for q := p; ; {
			if !seen[q] {
				seen[q] = true
				out = append(out, q)
			}
			i := strings.LastIndexByte(q, '/')
			if i <= 0 {
				break
			}
			q = q[:i]
		}
	}
	slices.Sort(out)
	return out
}

// describe writes what parse made of path: the identity's non-empty fields
// and the workload's own cgroup.
func describe(path string, id ident.Identity, base string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q", path)
	v := reflect.ValueOf(id)
	for i := range v.NumField() {
		if f := v.Field(i); !f.IsZero() {
			fmt.Fprintf(&b, " %s=%q", v.Type().Field(i).Name, fmt.Sprint(f.Interface()))
		}
	}
	fmt.Fprintf(&b, " base=%q\n", base)
	return b.String()
}

// TestParseGolden holds the parser to testdata/parse.golden, which the
// parser with one switch case per layout wrote over every fixture path
// before the layouts became rows of the kinds table (the two were compared
// path by path and fuzzed against each other before the switch was
// deleted): what each path resolves to, and which cgroup is its
// workload's own, did not change with the rewrite. -update rewrites the file (only for a deliberate
// change of what a path means, said in the commit).
func TestParseGolden(t *testing.T) {
	var b strings.Builder
	for _, p := range fixturePaths(t) {
		id, base := defaultParser.parse(p)
		b.WriteString(describe(p, id, base))
	}
	golden := filepath.Join("testdata", "parse.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(b.String(), "\n")
	wantLines := strings.Split(string(want), "\n")
	if len(got) != len(wantLines) {
		t.Errorf("%d paths, the golden file has %d", len(got)-1, len(wantLines)-1)
	}
	for i := range min(len(got), len(wantLines)) {
		if got[i] != wantLines[i] {
			t.Errorf("line %d\n got %s\nwant %s", i+1, got[i], wantLines[i])
		}
	}
	if len(got) < 300 {
		t.Errorf("only %d fixture paths: a source of them is missing", len(got))
	}
}

// BenchmarkParse parses every fixture path once per iteration.
func BenchmarkParse(b *testing.B) {
	paths := fixturePaths(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range paths {
			defaultParser.parse(p)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(paths)), "ns/path")
}
