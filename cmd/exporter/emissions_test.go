package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// A provider that is down never fails start-up: the chain is built, its
// background reads run in the run group (the fake API is asked), and they
// stop with the group. A missing token file does fail, naming its key.
func TestEmissionsPartStartsWithProviderDown(t *testing.T) {
	var asked atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer api.Close()
	cfg, err := Load([]string{"--emissions.provider=rte", "--emissions.rte.url=" + api.URL, "--emissions.rte.refresh=50ms"})
	if err != nil {
		t.Fatal(err)
	}
	c := newComponents(zap.NewNop())
	defer c.close()
	opts, err := emissionsPart(cfg, c)
	if err != nil || len(opts) != 1 {
		t.Fatalf("emissionsPart with the provider down: %d options, %v", len(opts), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run group: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the carbon service did not stop with the run group")
	}
	if n := asked.Load(); n < 2 {
		t.Errorf("the provider was asked %d times in 300 ms at a 50 ms refresh, want >= 2", n)
	}

	cfg, err = Load([]string{"--emissions.provider=electricitymaps", "--emissions.electricitymaps.zone=DE",
		"--emissions.electricitymaps.token-file=/nonexistent/token"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := emissionsPart(cfg, newComponents(zap.NewNop())); err == nil || !strings.Contains(err.Error(), "emissions.electricitymaps.token-file") {
		t.Errorf("missing token file: %v, want an error naming emissions.electricitymaps.token-file", err)
	}
	cfg, err = Load([]string{"--emissions.enabled=false"})
	if err != nil {
		t.Fatal(err)
	}
	if opts, err := emissionsPart(cfg, newComponents(zap.NewNop())); err != nil || opts != nil {
		t.Errorf("emissions off: %v, %v", opts, err)
	}
}
