// Command dashlint lints the Grafana dashboards in each directory given
// (every *.json there, with the directory's .lint file of exclusions), with
// the rules of internal/dashlint: those of Grafana's dashboard-linter that
// apply to Prometheus dashboards.
//
//	go run ./scripts/dashlint [-strict] [-v] deploy/grafana/dashboards
//
// It prints its version, then every finding (excluded ones with -v), and
// exits 1 when a finding is an error (a warning too with -strict) or an
// entry of a .lint file matched nothing, 2 when it cannot read them.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wattrace/wattrace/internal/dashlint"
)

func main() {
	strict := flag.Bool("strict", false, "fail on warnings too")
	verbose := flag.Bool("v", false, "list excluded findings too")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: dashlint [-strict] [-v] DIR...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	fmt.Println(dashlint.VersionString())
	failed := false
	for _, dir := range flag.Args() {
		files, findings, unused, err := dashlint.Dir(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dashlint:", err)
			os.Exit(2)
		}
		for _, f := range files {
			n := 0
			for _, x := range findings[f] {
				if x.Excluded && !*verbose {
					continue
				}
				fmt.Printf("%s: %s\n", filepath.Base(f), x)
				n++
			}
			if dashlint.Failed(findings[f], *strict) {
				failed = true
			}
			fmt.Printf("%s: %d findings shown, %d in all\n", f, n, len(findings[f]))
		}
		for _, u := range unused {
			fmt.Printf("%s: %s\n", filepath.Join(dir, dashlint.ConfigFile), u)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
