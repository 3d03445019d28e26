package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"golang.org/x/sys/unix"
)

const unitFile = "../systemd/wattrace.service"

// unitSettings reads the [Service] section's settings (last one wins).
func unitSettings(t *testing.T) map[string]string {
	t.Helper()
	return settingsOf(t, unitFile)
}

// settingsOf reads the [Service] section's settings of a unit file.
func settingsOf(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			s[k] = v
		}
	}
	return s
}

// verify runs systemd-analyze verify on unit text under a root holding the
// built binary where ExecStart names it and the host's system units (the
// targets the unit depends on); it returns what verify printed.
func verify(t *testing.T, analyze, bin, unit string) string {
	t.Helper()
	return verifyUnit(t, analyze, bin, "wattrace", "wattrace.service", unit, "")
}

// verifyWith is verify with dropIn installed as the unit's drop-in
// wattrace.service.d/gpu.conf.
func verifyWith(t *testing.T, analyze, bin, unit, dropIn string) string {
	t.Helper()
	return verifyUnit(t, analyze, bin, "wattrace", "wattrace.service", unit, dropIn)
}

// verifyUnit is verify for any unit: bin is installed as
// /usr/local/bin/binName, the unit as /etc/systemd/system/unitName and,
// when dropIn is not empty, the drop-in as unitName.d/gpu.conf.
func verifyUnit(t *testing.T, analyze, bin, binName, unitName, unit, dropIn string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/local/bin", "etc/systemd/system", "usr/lib/systemd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", bin, filepath.Join(root, "usr/local/bin", binName)).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if out, err := exec.Command("cp", "-r", "/usr/lib/systemd/system", filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/systemd/system", unitName), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	if dropIn != "" {
		dir := filepath.Join(root, "etc/systemd/system", unitName+".d")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "gpu.conf"), []byte(dropIn), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(analyze, "verify", "--root="+root, "/etc/systemd/system/"+unitName).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// systemd-analyze verify is clean on the unit, and not on a unit with a
// typo, so the check can fail.
func TestSystemdUnitVerifies(t *testing.T) {
	testenv.RequireRoot(t)
	analyze := testenv.Tool(t, "systemd-analyze", "systemd")
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildWattrace(t)
	if out := verify(t, analyze, bin, string(unit)); out != "" {
		t.Errorf("systemd-analyze verify %s:\n%s", unitFile, out)
	}
	bad := strings.Replace(string(unit), "ProtectHome=yes", "ProtectHome=maybe", 1)
	if out := verify(t, analyze, bin, bad); !strings.Contains(out, "ProtectHome") && !strings.Contains(out, "protect home") {
		t.Errorf("verify passed a unit with ProtectHome=maybe: %q", out)
	}
	s := unitSettings(t)
	for k, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "ReadOnlyPaths": "/", "LimitMEMLOCK": "infinity",
		"AmbientCapabilities":   "CAP_BPF CAP_PERFMON CAP_DAC_READ_SEARCH",
		"CapabilityBoundingSet": "CAP_BPF CAP_PERFMON CAP_DAC_READ_SEARCH",
	} {
		if s[k] != want {
			t.Errorf("%s=%q, want %q", k, s[k], want)
		}
	}
	if !strings.HasPrefix(s["ExecStart"], "/usr/local/bin/wattrace") {
		t.Errorf("ExecStart=%q", s["ExecStart"])
	}
}

const gpuDropIn = "../systemd/wattrace.service.d/gpu.conf"

// The GPU drop-in verifies with the unit, and a drop-in with a typo does
// not; it turns PrivateDevices off for a closed device policy that opens
// the NVIDIA nodes only, and adds CAP_SYS_PTRACE and nothing else.
func TestSystemdGPUDropInVerifies(t *testing.T) {
	testenv.RequireRoot(t)
	analyze := testenv.Tool(t, "systemd-analyze", "systemd")
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	drop, err := os.ReadFile(gpuDropIn)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildWattrace(t)
	if out := verifyWith(t, analyze, bin, string(unit), string(drop)); out != "" {
		t.Errorf("systemd-analyze verify with %s:\n%s", gpuDropIn, out)
	}
	bad := strings.Replace(string(drop), "DevicePolicy=closed", "DevicePolicy=shut", 1)
	if out := verifyWith(t, analyze, bin, string(unit), bad); !strings.Contains(out, "DevicePolicy") && !strings.Contains(out, "device policy") {
		t.Errorf("verify passed a drop-in with DevicePolicy=shut: %q", out)
	}
	var allow []string
	set := map[string]string{}
	for _, line := range strings.Split(string(drop), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if k == "DeviceAllow" {
			allow = append(allow, v)
		}
		set[k] = v
	}
	if set["PrivateDevices"] != "no" || set["DevicePolicy"] != "closed" || set["AmbientCapabilities"] != "CAP_SYS_PTRACE" ||
		set["CapabilityBoundingSet"] != "CAP_SYS_PTRACE" || strings.Join(allow, ",") != "char-nvidia-frontend rw,char-nvidia-caps r" {
		t.Errorf("drop-in settings %v, device allow %v", set, allow)
	}
}

// capNumbers maps the unit's capability names to their numbers.
var capNumbers = map[string]uint{"CAP_BPF": unix.CAP_BPF, "CAP_PERFMON": unix.CAP_PERFMON, "CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH}

// The binary, run as an unprivileged uid with exactly the unit's
// capabilities (ambient and bounding set) and no_new_privs, as systemd
// starts it, reaches BPF accounting and attributes energy.
func TestCapabilitySetReachesBPF(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.Tool(t, "setpriv", "util-linux")
	caps := strings.Fields(unitSettings(t)["AmbientCapabilities"])
	if len(caps) == 0 {
		t.Fatal("unit has no AmbientCapabilities")
	}
	var list []string
	var mask uint64
	for _, c := range caps {
		n, ok := capNumbers[c]
		if !ok {
			t.Fatalf("capability %s not known to this test", c)
		}
		mask |= 1 << n
		list = append(list, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	set := "-all," + strings.Join(list, ",")
	bin := buildWattrace(t)
	port := freePort(t)
	const nobody = 65534
	cmd := exec.Command(setpriv, "--reuid="+strconv.Itoa(nobody), "--regid="+strconv.Itoa(nobody), "--clear-groups",
		"--inh-caps="+set, "--ambient-caps="+set, "--bounding-set="+set, "--no-new-privs",
		bin, fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	start(t, cmd)
	fams := waitFor(t, localURL(port), 60*time.Second, "BPF mode as uid 65534 with "+strings.Join(caps, ","), bpfMode)

	// The process really is unprivileged and holds exactly those.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", nobody, nobody, nobody, nobody),
		fmt.Sprintf("CapEff:\t%016x", mask), fmt.Sprintf("CapBnd:\t%016x", mask), "NoNewPrivs:\t1",
	} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("exporter's status lacks %q:\n%s", want, status)
		}
	}
	node, _ := value(fams, "wattrace_node_energy_joules_total", nil)
	rootCg, _ := value(fams, "wattrace_cgroup_energy_joules_total", map[string]string{"cgroup": "/"})
	t.Logf("uid %d, caps %s: bpf mode, node %.3f J, root cgroup %.3f J", nobody, strings.Join(caps, ","), node, rootCg)
	if v, ok := value(fams, "wattrace_node_energy_joules_total", nil); !ok || v <= 0 {
		t.Errorf("node energy %v (%v), want > 0", v, ok)
	}
	if v, ok := value(fams, "wattrace_cgroup_energy_joules_total", map[string]string{"cgroup": "/"}); !ok || v <= 0 {
		t.Errorf("root cgroup energy %v (%v), want > 0", v, ok)
	}
}

const guestsDropIn = "../systemd/wattrace.service.d/guests.conf"

// The libvirt hosts' drop-in (docs/vm.md) gives the service the one
// writable directory the guests' shares need, readable by QEMU, and points
// guests.share.path at it; the unit with it applied verifies.
func TestSystemdGuestsDropIn(t *testing.T) {
	b, err := os.ReadFile(guestsDropIn)
	if err != nil {
		t.Fatal(err)
	}
	s := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		s[k] = append(s[k], v)
	}
	const dir = "/var/lib/wattrace/guests"
	for k, want := range map[string]string{
		"DynamicUser": "no", "StateDirectory": "wattrace/guests", "StateDirectoryMode": "0755",
		"ReadWritePaths": dir, "Environment": "WATTRACE_GUESTS_SHARE_PATH=" + dir,
	} {
		if fmt.Sprint(s[k]) != "["+want+"]" {
			t.Errorf("%s=%v, want %s", k, s[k], want)
		}
	}
	// The capabilities stay the unit's: the drop-in must not widen them.
	for _, k := range []string{"AmbientCapabilities", "CapabilityBoundingSet", "User", "ReadOnlyPaths"} {
		if _, ok := s[k]; ok {
			t.Errorf("drop-in sets %s", k)
		}
	}
	testenv.RequireRoot(t)
	analyze := testenv.Tool(t, "systemd-analyze", "systemd")
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	if out := verify(t, analyze, buildWattrace(t), string(unit)+"\n"+string(b)); out != "" {
		t.Errorf("systemd-analyze verify of the unit with %s:\n%s", guestsDropIn, out)
	}
}
