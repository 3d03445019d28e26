package bpfloader

// The generated bindings and objects are committed so that `go build` needs
// no clang; `make generate` rebuilds them and CI fails when they are stale.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type task_rec -type cgroup_rec accounting ../../bpf/accounting.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel floor ../../bpf/floor.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type cgroup_name cgroupnames ../../bpf/cgroupnames.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -type stat_field -type stats -type vec_stat probes ../../bpf/probes.bpf.c
