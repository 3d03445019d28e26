package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestLoggerJSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger("warn", "json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("dropped")
	log.Warn("kept", zap.Int("n", 3))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1 (info filtered at warn): %q", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["msg"] != "kept" || rec["level"] != "warn" || rec["n"] != 3.0 {
		t.Errorf("record %v", rec)
	}
}

func TestLoggerBadValues(t *testing.T) {
	if _, err := NewLogger("loud", "json", io.Discard); err == nil {
		t.Error("bad level accepted")
	}
	if _, err := NewLogger("info", "xml", io.Discard); err == nil {
		t.Error("bad format accepted")
	}
}

// exporter-toolkit logs through slog; zap's bridge must keep level
// filtering, the logger's name, attributes, groups and errors.
func TestSlogBridge(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger("info", "json", &buf)
	if err != nil {
		t.Fatal(err)
	}
	sl := SlogLogger(log, "web")
	sl.Debug("hidden")
	sl.With("address", ":9841").WithGroup("tls").Error("listen failed", "err", errors.New("boom"), "port", 9841)
	var rec map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &rec); err != nil {
		t.Fatalf("want exactly one JSON record, got %q: %v", buf.String(), err)
	}
	want := map[string]any{"level": "error", "logger": "web", "msg": "listen failed", "address": ":9841"}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("%s = %v, want %v (record %v)", k, rec[k], v, rec)
		}
	}
	if tls, _ := rec["tls"].(map[string]any); tls["err"] != "boom" || tls["port"] != 9841.0 {
		t.Errorf("group tls = %v, want err=boom port=9841 (record %v)", rec["tls"], rec)
	}
}

// --log.format=logfmt writes logfmt in node_exporter's shape: ts (UTC,
// milliseconds), level, caller, msg, then the fields; values with spaces
// or quotes are quoted; slog records from exporter-toolkit look the same.
func TestLoggerLogfmt(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger("info", "logfmt", &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("meter opened", zap.String("meter", "rapl"), zap.Int("zones", 2), zap.String("path", "/sys/class/powercap"),
		zap.String("note", `has "quotes" and spaces`), zap.Duration("interval", 1500*time.Millisecond))
	log.Named("promhttp").Warn("scrape failed", zap.Error(errors.New("boom")))
	SlogLogger(log, "web").WithGroup("tls").Info("Listening on", "address", "[::]:9841")
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	ts := `ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z `
	want := []string{
		`^` + ts + `level=info caller=cli/log_test\.go:\d+ msg="meter opened" meter=rapl zones=2 path=/sys/class/powercap note="has \\"quotes\\" and spaces" interval=1\.5s$`,
		`^` + ts + `level=warn caller=cli/log_test\.go:\d+ msg="scrape failed" logger=promhttp error=boom$`,
		`^` + ts + `level=info caller=cli/log_test\.go:\d+ msg="Listening on" logger=web tls\.address=\[::\]:9841$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(lines[i]) {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], w)
		}
	}
}
