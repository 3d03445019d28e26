package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

const apiUnitFile = "../systemd/wattrace-api.service"

// buildAPI builds cmd/wattrace-api.
func buildAPI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "wattrace-api")
	cmd := exec.Command(goBin(), "build", "-o", bin, "./cmd/wattrace-api")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// The API server's unit verifies with systemd-analyze (and a typo does
// not), runs as a dynamic user without capabilities, and keeps its store
// in its state directory.
func TestSystemdAPIUnitVerifies(t *testing.T) {
	testenv.RequireRoot(t)
	analyze := testenv.Tool(t, "systemd-analyze", "systemd")
	unit, err := os.ReadFile(apiUnitFile)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildAPI(t)
	if out := verifyUnit(t, analyze, bin, "wattrace-api", "wattrace-api.service", string(unit), ""); out != "" {
		t.Errorf("systemd-analyze verify %s:\n%s", apiUnitFile, out)
	}
	bad := strings.Replace(string(unit), "StateDirectory=wattrace-api", "StateDirectory=/var/lib/wattrace-api", 1)
	if out := verifyUnit(t, analyze, bin, "wattrace-api", "wattrace-api.service", bad, ""); !strings.Contains(out, "StateDirectory") {
		t.Errorf("verify passed a unit with an absolute StateDirectory: %q", out)
	}
	s := settingsOf(t, apiUnitFile)
	for k, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "StateDirectory": "wattrace-api", "StateDirectoryMode": "0700",
		"CapabilityBoundingSet": "", "AmbientCapabilities": "", "UMask": "0077",
		// unmunge (api.munge.enabled) reaches munged's socket.
		"ReadWritePaths": "-/run/munge",
	} {
		if v, ok := s[k]; !ok || v != want {
			t.Errorf("%s=%q (set: %v), want %q", k, v, ok, want)
		}
	}
	if !strings.HasPrefix(s["ExecStart"], "/usr/local/bin/wattrace-api --config.file=/etc/wattrace-api/config.yaml") {
		t.Errorf("ExecStart=%q", s["ExecStart"])
	}
}
