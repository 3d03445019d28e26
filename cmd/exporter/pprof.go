//go:build pprof

package main

// A profiling build (go build -tags pprof ./cmd/exporter) serves
// net/http/pprof on WATTRACE_PPROF (e.g. 127.0.0.1:6060), apart from the
// exporter's own listeners, for the profiles in docs/performance.md. The
// default build has none of it.

import (
	"net/http"
	_ "net/http/pprof" // registers on http.DefaultServeMux
	"os"
)

func init() {
	if addr := os.Getenv("WATTRACE_PPROF"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
