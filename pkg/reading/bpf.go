package reading

import "time"

// ProgramStat is one BPF program's cost as the kernel counts it while BPF
// statistics are enabled (kernel.bpf_stats_enabled).
type ProgramStat struct {
	Name     string
	RunTime  time.Duration
	RunCount uint64
}

// MapDrops counts the events a BPF program could not record because a map
// was full: their CPU time, bytes or counts are lost, not attributed to
// anyone. Map is the map's name as in the BPF object.
type MapDrops struct {
	Map   string
	Drops uint64
}
