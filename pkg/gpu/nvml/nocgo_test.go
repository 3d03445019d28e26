//go:build !cgo

package nvml

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Built without cgo, the source is off with one info line saying why.
func TestOpenWithoutCgo(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	src, err := Open(Options{Mode: "auto"}, zap.New(core))
	if src != nil || err != nil || logs.Len() != 1 {
		t.Fatalf("%v %v %v", src, err, logs.All())
	}
}
