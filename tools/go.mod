module github.com/wattrace/wattrace/tools

go 1.26.8

tool (
	github.com/fzipp/gocyclo/cmd/gocyclo
	golang.org/x/perf/cmd/benchstat
)

require (
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
	github.com/fzipp/gocyclo v0.6.0 // indirect
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da // indirect
)
