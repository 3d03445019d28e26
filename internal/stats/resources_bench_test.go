package stats

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/cgroupstats"
	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

// v1MemoryStat is a cgroup v1 memory.stat as Linux 6.x writes it: 41
// lines, of which the reader wants total_rss, total_cache and total_swap.
var v1MemoryStat = func() string {
	keys := strings.Fields(`cache rss rss_huge shmem mapped_file dirty writeback workingset_refault_anon
		workingset_refault_file swap swapcached pgpgin pgpgout pgfault pgmajfault inactive_anon active_anon
		inactive_file active_file unevictable hierarchical_memory_limit hierarchical_memsw_limit`)
	var b strings.Builder
	for _, total := range []bool{false, true} {
		for i, k := range keys {
			if total && strings.HasPrefix(k, "hierarchical_") {
				continue
			}
			if total {
				k = "total_" + k
			}
			fmt.Fprintf(&b, "%s %d\n", k, 4096*(i+1)*12345)
		}
	}
	return b.String()
}()

// fixtureJobs writes n Slurm jobs' cgroup v1 memory files under a fresh
// directory and returns the reader's layout over it.
func fixtureJobs(b *testing.B, n int) (cgroupstats.Layout, []string) {
	root := b.TempDir()
	files := map[string]string{
		"memory.usage_in_bytes": "1234567890\n",
		"memory.limit_in_bytes": "9223372036854771712\n",
		"memory.stat":           v1MemoryStat,
		"memory.failcnt":        "0\n",
		"memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
	}
	var rels []string
	for i := range n {
		rel := fmt.Sprintf("/slurm/uid_1000/job_%d", 1000+i)
		dir := filepath.Join(root, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		rels = append(rels, rel)
	}
	return cgroupstats.Layout{V1Roots: map[string]string{"memory": root}}, rels
}

// realJobs makes n empty cgroups in the host's memory hierarchy (v1's
// memory controller, else the unified one) and returns the host's layout.
func realJobs(b *testing.B, n int) (cgroupstats.Layout, []string) {
	testenv.RequireRoot(b)
	ms, err := cgroup.ReadMounts("/proc", "/sys/fs/cgroup")
	if err != nil {
		b.Fatal(err)
	}
	l, err := cgroupstats.LayoutOf(ms)
	if err != nil {
		testenv.Need(b, "no cgroup hierarchy: %v", err)
	}
	mount := l.V1Roots["memory"]
	if mount == "" {
		mount = l.V2Root
	}
	top := testenv.Cgroup(b, mount, "fill")
	var rels []string
	for i := range n {
		dir := testenv.Mkdir(b, filepath.Join(top, fmt.Sprintf("job_%d", 1000+i)))
		rels = append(rels, strings.TrimPrefix(dir, mount))
	}
	return l, rels
}

// BenchmarkResourceFill200 is what the first scrape of each snapshot pays
// for collector.resources=memory (the default) on a node of 200 Slurm
// jobs: one fill of 200 workloads through the real cgroupstats reader,
// five files a job on cgroup v1, from a fixture tree (files on tmpfs: the
// reader's own cost) and from 200 real cgroups (the kernel writing each
// file), reading every workload at every scrape (stale-scrapes=0) or each
// every other scrape (1, the default).
func BenchmarkResourceFill200(b *testing.B) {
	const jobs = 200
	for _, tree := range []struct {
		name  string
		build func(*testing.B, int) (cgroupstats.Layout, []string)
	}{{"fixture", fixtureJobs}, {"cgroupfs", realJobs}} {
		b.Run(tree.name, func(b *testing.B) {
			l, rels := tree.build(b, jobs)
			ts := make([]resourceTarget, len(rels))
			for i, rel := range rels {
				ts[i] = resourceTarget{key: "job\x00" + rel, root: rel, alive: true}
			}
			for _, stale := range []int{0, 1} {
				b.Run(fmt.Sprintf("stale-scrapes=%d", stale), func(b *testing.B) {
					r := cgroupstats.NewReaderWith(l, cgroupstats.Options{})
					r.Only(cgroupstats.GroupMemory)
					c := newResourceCache(r, stale)
					for _, res := range c.fill(ts)() {
						if res == nil || res.Available == 0 {
							b.Fatal("a job's memory files read nothing")
						}
					}
					b.ReportAllocs()
					for b.Loop() {
						c.fill(ts)()
					}
				})
			}
		})
	}
}
