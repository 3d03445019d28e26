package bpfloader

import (
	"fmt"
	"testing"
	"unsafe"
)

// taskRecords encodes the task iterator's records of procs processes of
// threads threads each, spread over cgroups cgroups, in the order the
// kernel's walk returns them (by thread id), each with a little runtime.
func taskRecords(procs, threads, cgroups int) []byte {
	b := make([]byte, 0, procs*threads*recSize)
	tid := uint32(1000)
	for p := range procs {
		tgid := tid
		for range threads {
			rec := accountingTaskRec{Tid: tid, Tgid: tgid, Start: uint64(tid) * 1000, LeaderStart: uint64(tgid) * 1000,
				Cgroup: uint64(1 + p%cgroups), Runtime: 1000, Switches: 1, Cpu: int32(tid % 2)}
			for i, c := range fmt.Sprintf("worker-%d", p%97) {
				rec.Comm[i] = int8(c)
			}
			b = append(b, unsafe.Slice((*byte)(unsafe.Pointer(&rec)), recSize)...)
			tid++
		}
	}
	return b
}

// BenchmarkDecodeTasks is the loader's share of a BPF read that the kernel's
// walk leaves: decoding the iterator's records and folding them into the
// per-process and per-cgroup counters, then the reading (state.finish),
// for 10,000 single-threaded processes in 1,000 cgroups and for 100,000
// threads in 2,000 processes of 50 (a large Java or OpenMP host).
func BenchmarkDecodeTasks(b *testing.B) {
	for _, c := range []struct{ procs, threads, cgroups int }{{10000, 1, 1000}, {2000, 50, 2000}} {
		b.Run(fmt.Sprintf("tasks=%d,procs=%d", c.procs*c.threads, c.procs), func(b *testing.B) {
			recs := taskRecords(c.procs, c.threads, c.cgroups)
			s := newState()
			read := func() {
				s.begin()
				if err := eachTask(recs, s.task); err != nil {
					b.Fatal(err)
				}
				r, _, _ := s.finish(nil, nil)
				if len(r.Processes) != c.procs {
					b.Fatalf("%d processes, want %d", len(r.Processes), c.procs)
				}
			}
			read()
			b.ReportAllocs()
			for b.Loop() {
				read()
			}
		})
	}
}
