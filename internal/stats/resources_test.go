package stats

import (
	"fmt"
	"testing"

	"github.com/wattrace/wattrace/pkg/reading"
)

// fillReader stamps each reading with the fill it was read at (in
// MemoryCurrent), and counts the reads of each cgroup.
type fillReader struct {
	fill  int
	reads map[string]int
}

func (f *fillReader) ReadInto(rel string, s *reading.Resources) error {
	f.reads[rel]++
	*s = reading.Resources{MemoryCurrent: uint64(f.fill), Available: reading.FieldMemoryCurrent}
	return nil
}

// A workload's reading is exported by the scrape it was read for and by
// at most stale-scrapes after it; the reads are spread evenly over the
// scrapes rather than all of them falling on one; a workload whose top
// cgroup changes is read at once, and an ended one keeps its last reading.
func TestResourceReadingsAtMostStaleScrapesOld(t *testing.T) {
	const jobs, fills = 6, 12
	for _, stale := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("stale=%d", stale), func(t *testing.T) {
			r := &fillReader{reads: map[string]int{}}
			c := newResourceCache(r, stale)
			ts := make([]resourceTarget, jobs)
			for i := range ts {
				ts[i] = resourceTarget{key: fmt.Sprintf("job\x00%d", i), root: fmt.Sprintf("/slurm/job_%d", i), alive: true}
			}
			total := 0
			for f := 1; f <= fills; f++ {
				r.fill = f
				before := total
				out := c.fill(ts)()
				total = 0
				for _, n := range r.reads {
					total += n
				}
				for i, res := range out {
					if res == nil {
						t.Fatalf("fill %d: job %d has no reading", f, i)
					}
					if age := f - int(res.MemoryCurrent); age < 0 || age > stale {
						t.Errorf("fill %d: job %d exports a reading %d scrapes old, want at most %d", f, i, age, stale)
					}
				}
				// After the first, which reads them all, each fill
				// reads about 1/(stale+1) of the workloads.
				if read := total - before; f > 1 && (read < jobs/(stale+1) || read > (jobs+stale)/(stale+1)) {
					t.Errorf("fill %d read %d of %d workloads, want %d", f, read, jobs, jobs/(stale+1))
				}
			}
			// Job 0 moves to another top cgroup: read at the next fill,
			// whatever its turn. Job 1 ends: not read, its last reading
			// stays.
			ts[0].root, ts[1].alive = "/slurm/job_0b", false
			r.fill = fills + 1
			lastOf1, readsOf1 := &c.last[ts[1].key].res, r.reads["/slurm/job_1"]
			out := c.fill(ts)()
			if r.reads["/slurm/job_0b"] != 1 || out[0].MemoryCurrent != fills+1 {
				t.Errorf("a workload whose top cgroup changed: %d reads of the new one, reading of fill %d", r.reads["/slurm/job_0b"], out[0].MemoryCurrent)
			}
			if out[1] != lastOf1 || r.reads["/slurm/job_1"] != readsOf1 {
				t.Errorf("an ended workload: reading %v, want its last %v; read %d times, want %d", out[1], lastOf1, r.reads["/slurm/job_1"], readsOf1)
			}
		})
	}
}
