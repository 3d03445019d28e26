package deploy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

// The DaemonSet's view of the host, reproduced without a container engine:
// the built binary runs in a mount namespace of its own (unshare -m) and a
// minimal root holding only the binary, a fresh /proc and read-only /sys as
// a runtime gives a container, the service-account token the kubelet
// mounts, and the host paths bind-mounted read-only exactly where the
// rendered DaemonSet mounts them, started with the DaemonSet's args and
// env. It must reach BPF mode, key workloads by the host's hierarchy and
// charge a busy cgroup's energy.
func TestContainerLikeRun(t *testing.T) {
	testenv.RequireRoot(t)
	unshare := testenv.Tool(t, "unshare", "util-linux")
	h, err := cgroup.Detect("/proc", "/sys/fs/cgroup", "auto")
	if err != nil {
		t.Fatal(err)
	}

	kubelet := fakeKubelet()
	defer kubelet.Close()
	ku, _ := url.Parse(kubelet.URL)
	port := freePort(t)
	objs := render(t, []string{"--set", "kubelet.port=" + ku.Port(), "--set", fmt.Sprintf("port=%d", port)})
	ds := find[*appsv1.DaemonSet](t, objs)
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	env, args := kubeletEnvArgs(c)

	bin := buildWattrace(t)
	root := t.TempDir()
	token := filepath.Join(root, "token")
	if err := os.WriteFile(token, []byte("test-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := containerScript(t, pod, c)

	// No --fork: sh and chroot exec, so the exporter is cmd's process and
	// gets its SIGINT.
	cmd := exec.Command(unshare, append([]string{"--mount", "/bin/sh", "-c", strings.Join(script, "\n"), "sh"}, args...)...)
	cmd.Env = []string{"ROOT=" + root, "BIN=" + bin, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	start(t, cmd)
	u := localURL(port)
	fams := waitFor(t, u, 90*time.Second, "BPF mode in the container-like run", bpfMode)

	if v, ok := value(fams, "wattrace_cgroup_hierarchy_info", map[string]string{"hierarchy": string(h.Kind)}); !ok || v != 1 {
		t.Errorf("wattrace_cgroup_hierarchy_info{hierarchy=%q} = %v (%v), want 1: %v", h.Kind, v, ok, fams["wattrace_cgroup_hierarchy_info"])
	}
	checkBusyCgroupCharged(t, u, h)
}

// fakeKubelet is a kubelet serving an empty pod list over TLS to the
// service account's token, on the port the chart is told the kubelet
// listens on.
func fakeKubelet() *httptest.Server {
	return httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/pods" || r.Header.Get("Authorization") != "Bearer test-token" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","items":[]}`)
	}))
}

// kubeletEnvArgs is c's env as the kubelet sets it, then c's args with
// $(VAR) expanded as it does.
func kubeletEnvArgs(c corev1.Container) (map[string]string, []string) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP":
			env[e.Name] = "127.0.0.1"
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = "test-node"
		default:
			env[e.Name] = e.Value
		}
	}
	var args []string
	for _, a := range c.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		args = append(args, a)
	}
	return env, args
}

// containerScript is the shell script that builds the container's root
// and execs the exporter in it. The script runs in the new mount
// namespace: nothing it mounts is seen outside, and it all goes when the
// exporter exits.
func containerScript(t *testing.T, pod corev1.PodSpec, c corev1.Container) []string {
	t.Helper()
	hostPath := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPath[v.Name] = v.HostPath.Path
		}
	}
	script := []string{
		"set -e",
		"mount --make-rprivate /",
		`r="$ROOT/root"; mkdir "$r"; mount -t tmpfs -o mode=0755 wattrace-root "$r"`,
		`mkdir -p "$r/bin" "$r/proc" "$r/sys" "$r/tmp" "$r/var/run/secrets/kubernetes.io/serviceaccount"`,
		`cp "$BIN" "$r/bin/wattrace"`,
		`cp "$ROOT/token" "$r/var/run/secrets/kubernetes.io/serviceaccount/token"`,
		// What the runtime gives every container (hostPID: the host's PIDs).
		`mount -t proc proc "$r/proc"`,
		`mount -t sysfs -o ro sysfs "$r/sys"`,
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		src, ok := hostPath[m.Name]
		if !ok {
			continue // not a host path (the web config Secret, when set)
		}
		if _, err := os.Stat(src); err != nil {
			if m.Name != "pod-resources" {
				t.Fatalf("host path %s of volume %s: %v", src, m.Name, err)
			}
			createPodResources(t, src)
		}
		if !m.ReadOnly {
			t.Fatalf("volume %s is mounted writable", m.Name)
		}
		// Kubernetes bind-mounts host paths recursively; read-only.
		script = append(script,
			fmt.Sprintf(`mkdir -p "$r%s"`, m.MountPath),
			fmt.Sprintf(`mount --rbind %q "$r%s"`, src, m.MountPath),
			fmt.Sprintf(`mount -o remount,bind,ro "$r%s"`, m.MountPath))
		mounted[m.Name] = true
	}
	for _, v := range []string{"proc", "sys", "cgroup", "pod-resources"} {
		if !mounted[v] {
			t.Fatalf("the DaemonSet mounts no %s volume", v)
		}
	}
	// A read-only root, as the chart's readOnlyRootFilesystem.
	return append(script, `mount -o remount,ro "$r"`,
		`exec chroot "$r" /bin/wattrace "$@"`)
}

// createPodResources creates the pod-resources directory src as its
// hostPath's DirectoryOrCreate has the kubelet do, and removes what it
// created (empty directories only) when the test ends.
func createPodResources(t *testing.T, src string) {
	t.Helper()
	top := src
	for p := filepath.Dir(src); p != "/"; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		top = p
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for p := src; ; p = filepath.Dir(p) {
			_ = os.Remove(p) // empty directories only
			if p == top {
				return
			}
		}
	})
}

// checkBusyCgroupCharged: the exporter at u reads the host through the
// mounts: the host's root cgroup has energy and a busy cgroup of the
// test's gets more each interval, and CPU time.
func checkBusyCgroupCharged(t *testing.T, u string, h cgroup.Hierarchy) {
	t.Helper()
	dir := testenv.Cgroup(t, h.Mount, "ctr")
	rel := "/" + filepath.Base(dir)
	testenv.StartIn(t, dir, testenv.Busy...)
	energy := func(f map[string]*dto.MetricFamily) float64 {
		v, _ := value(f, "wattrace_cgroup_energy_joules_total", map[string]string{"cgroup": rel})
		return v
	}
	first := waitFor(t, u, 30*time.Second, "energy for "+rel, func(f map[string]*dto.MetricFamily) bool { return energy(f) > 0 })
	e1, n1 := energy(first), intervals(first)
	later := waitFor(t, u, 30*time.Second, "two more intervals", func(f map[string]*dto.MetricFamily) bool { return intervals(f) >= n1+2 })
	e2 := energy(later)
	t.Logf("hierarchy %s; busy cgroup %s: %.3f J then %.3f J two intervals later", h.Kind, rel, e1, e2)
	if !(e2 > e1) {
		t.Errorf("busy cgroup's energy did not grow: %.3f J then %.3f J", e1, e2)
	}
	// Its share of the CPU: the cgroup's CPU time grew by about the
	// intervals' length (a busy loop on one CPU).
	if cpu, ok := value(later, "wattrace_cgroup_cpu_seconds_total", map[string]string{"cgroup": rel}); !ok || cpu <= 0 {
		t.Errorf("busy cgroup CPU %v (%v), want > 0", cpu, ok)
	}
}

func intervals(f map[string]*dto.MetricFamily) float64 {
	n, _ := value(f, "wattrace_stats_intervals_total", nil)
	return n
}
