package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// helmVersion is installed with `go install` from the module proxy when no
// helm is on PATH, so `make test` needs nothing beyond Go.
const helmVersion = "v3.22.0"

const chart = "../helm/wattrace"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm returns a helm binary: the one on PATH, else one installed into
// GOPATH/bin (kept for later runs).
func helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if p, err := exec.LookPath("helm"); err == nil {
			helmPath = p
			return
		}
		gopath, err := exec.Command(goBin(), "env", "GOPATH").Output()
		if err != nil {
			helmErr = fmt.Errorf("go env GOPATH: %w", err)
			return
		}
		bin := filepath.Join(strings.SplitN(strings.TrimSpace(string(gopath)), ":", 2)[0], "bin")
		helmPath = filepath.Join(bin, "helm")
		// A helm built by go install reports only major.minor ("v3.22").
		if out, err := exec.Command(helmPath, "version", "--template", "{{.Version}}").Output(); err == nil &&
			len(out) > 0 && strings.HasPrefix(helmVersion, strings.TrimSpace(string(out))) {
			return
		}
		cmd := exec.Command(goBin(), "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+bin, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = fmt.Errorf("go install helm %s: %v\n%s", helmVersion, err, out)
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// goBin is the go command: the one on PATH, else the standard install.
func goBin() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

func runHelm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// valueSets are the configurations the tests render: the defaults, and
// every toggle turned the other way.
var valueSets = map[string][]string{
	"defaults": nil,
	"everything": {
		"--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true",
		"--set", "web.configSecret=wattrace-web", "--set", "web.scheme=https",
		"--set", "serviceMonitor.tlsConfig.insecureSkipVerify=true",
		"--set", "podMonitor.tlsConfig.insecureSkipVerify=true",
		"--set", "serviceMonitor.basicAuth.username.name=wattrace-scrape",
		"--set", "serviceMonitor.basicAuth.username.key=username",
		"--set", "serviceMonitor.basicAuth.password.name=wattrace-scrape",
		"--set", "serviceMonitor.basicAuth.password.key=password",
		"--set", "extraArgs={--collector.process,--power.idle-policy=cpu}",
		"--set", "priorityClassName=system-node-critical",
		"--set", "guestShares.hostPath=/var/lib/wattrace/guests", "--set", "guestShares.interval=2s",
	},
	// The units API server beside the exporter (docs/units.md).
	"units-api": {
		"--set", "unitsAPI.enabled=true", "--set", "unitsAPI.web.configSecret=wattrace-api-web",
		"--set", "unitsAPI.web.scheme=https",

		"--set", "unitsAPI.extraSecretMounts[0].name=tokens",
		"--set", "unitsAPI.extraSecretMounts[0].secretName=wattrace-api-tokens",
		"--set", "unitsAPI.extraSecretMounts[0].mountPath=/etc/wattrace-api/tokens",
		"--set", "unitsAPI.guard.upstream=http://prometheus-operated.monitoring:9090",
		"--set", "unitsAPI.guard.public={wattrace_node_.*}", "--set", "unitsAPI.guard.clusterLabel=cluster",
	},
	"minimal": {
		"--set", "kubelet.enabled=false", "--set", "podResources.enabled=false",
		"--set", "serviceAccount.create=false", "--set", "rbac.create=false",
	},
}

func TestHelmLint(t *testing.T) {
	for name, set := range valueSets {
		out := runHelm(t, append([]string{"lint", "--strict", chart}, set...)...)
		if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") || strings.Contains(out, "[WARNING]") {
			t.Errorf("%s: helm lint:\n%s", name, out)
		}
	}
}

// object is one rendered document, decoded into its API type.
type object struct {
	kind, name string
	v          any
}

// decodeStrict converts a YAML document to JSON and decodes it into v as
// the API server does in strict mode: field names match case-sensitively
// (encoding/json would take hostPid for hostPID), and an unknown or
// duplicate field fails.
func decodeStrict(doc string, v any) error {
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, v, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// render runs helm template and decodes every object strictly into its
// k8s.io/api or Prometheus Operator type; an unknown kind fails.
func render(t *testing.T, set []string) []object {
	t.Helper()
	out := runHelm(t, append([]string{"template", "wattrace", chart, "--namespace", "wattrace"}, set...)...)
	return decodeAll(t, out)
}

func decodeAll(t *testing.T, out string) []object {
	t.Helper()
	var objs []object
	for _, doc := range strings.Split(out, "\n---") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("parse %q: %v", doc, err)
		}
		if meta.Kind == "" {
			continue // comments only
		}
		var v any
		switch meta.Kind {
		case "DaemonSet":
			v = &appsv1.DaemonSet{}
		case "Deployment":
			v = &appsv1.Deployment{}
		case "ConfigMap":
			v = &corev1.ConfigMap{}
		case "PersistentVolumeClaim":
			v = &corev1.PersistentVolumeClaim{}
		case "Service":
			v = &corev1.Service{}
		case "ServiceAccount":
			v = &corev1.ServiceAccount{}
		case "ClusterRole":
			v = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			v = &rbacv1.ClusterRoleBinding{}
		case "ServiceMonitor":
			v = &monitoringv1.ServiceMonitor{}
		case "PodMonitor":
			v = &monitoringv1.PodMonitor{}
		default:
			t.Fatalf("rendered a %s, which no test decodes", meta.Kind)
		}
		if err := decodeStrict(doc, v); err != nil {
			t.Fatalf("%s %s does not decode strictly: %v", meta.Kind, meta.Metadata.Name, err)
		}
		objs = append(objs, object{meta.Kind, meta.Metadata.Name, v})
	}
	return objs
}

func kinds(objs []object) map[string]int {
	n := map[string]int{}
	for _, o := range objs {
		n[o.kind]++
	}
	return n
}

func find[T any](t *testing.T, objs []object) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.v.(T); ok {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T rendered", zero)
	return zero
}

// The decoding strictness itself: a misspelt field must fail.
func TestDecodeStrictRejectsUnknownFields(t *testing.T) {
	doc := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostPid: true\n"
	if err := decodeStrict(doc, &appsv1.DaemonSet{}); err == nil || !strings.Contains(err.Error(), "hostPid") {
		t.Fatalf("misspelt hostPid decoded: %v", err)
	}
	if err := decodeStrict("kind: ServiceMonitor\nspec: {endpoint: []}\n", &monitoringv1.ServiceMonitor{}); err == nil {
		t.Fatal("ServiceMonitor with spec.endpoint decoded")
	}
}

func TestRenderedObjects(t *testing.T) {
	for name, set := range valueSets {
		t.Run(name, func(t *testing.T) {
			objs := render(t, set)
			want := map[string]int{"DaemonSet": 1, "Service": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1}
			switch name {
			case "everything":
				want["ServiceMonitor"], want["PodMonitor"] = 1, 1
			case "units-api":
				want["Deployment"], want["Service"], want["ConfigMap"], want["PersistentVolumeClaim"] = 1, 2, 1, 1
			case "minimal":
				delete(want, "ServiceAccount")
				delete(want, "ClusterRole")
				delete(want, "ClusterRoleBinding")
			}
			if got := kinds(objs); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("rendered %v, want %v", got, want)
			}
			checkDaemonSet(t, name, find[*appsv1.DaemonSet](t, objs))
			if name != "minimal" {
				checkRBAC(t, objs)
			}
			if name == "everything" {
				checkMonitors(t, objs)
			}
			if name == "units-api" {
				checkUnitsAPI(t, objs)
			}
		})
	}
}

// checkDaemonSet checks the exporter's DaemonSet as rendered with the
// value set name.
func checkDaemonSet(t *testing.T, name string, ds *appsv1.DaemonSet) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	c := checkExporterPod(t, pod)
	checkExporterSecurity(t, c.SecurityContext)
	mounts, host := checkHostMounts(t, name, pod, c)
	checkGuestShares(t, name, c, mounts, host)
	if _, ok := host["pod-resources"]; name == "minimal" && ok {
		t.Error("pod-resources mounted though disabled")
	}
	checkExporterArgs(t, name, c.Args)
	checkExporterProbes(t, name, c)
	checkExporterResources(t, c.Resources)
}

// checkExporterPod: the host's PIDs, every taint tolerated, one container
// (returned).
func checkExporterPod(t *testing.T, pod corev1.PodSpec) corev1.Container {
	t.Helper()
	if !pod.HostPID {
		t.Error("hostPID is off")
	}
	if len(pod.Tolerations) == 0 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v do not tolerate every taint", pod.Tolerations)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	return pod.Containers[0]
}

// checkExporterSecurity: unprivileged, no escalation, a read-only root,
// and of the capabilities only BPF, PERFMON and DAC_READ_SEARCH.
func checkExporterSecurity(t *testing.T, sc *corev1.SecurityContext) {
	t.Helper()
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Fatalf("security context %+v: want unprivileged, no escalation, read-only root", sc)
	}
	if fmt.Sprint(sc.Capabilities.Drop) != "[ALL]" || fmt.Sprint(sc.Capabilities.Add) != "[BPF PERFMON DAC_READ_SEARCH]" {
		t.Errorf("capabilities %+v, want drop ALL, add BPF PERFMON DAC_READ_SEARCH", sc.Capabilities)
	}
}

// checkHostMounts: every mount read-only but the guests' shares, and the
// host's /proc, /sys, cgroupfs and (unless minimal) the kubelet's
// pod-resources mounted where the args say. It returns the container's
// mounts by volume name and the host path of each hostPath volume.
func checkHostMounts(t *testing.T, name string, pod corev1.PodSpec, c corev1.Container) (map[string]corev1.VolumeMount, map[string]string) {
	t.Helper()
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
		if !m.ReadOnly && m.Name != "guest-shares" {
			t.Errorf("mount %s at %s is writable", m.Name, m.MountPath)
		}
	}
	host := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			host[v.Name] = v.HostPath.Path
		}
	}
	wantMounts := map[string][2]string{"proc": {"/proc", "/host/proc"}, "sys": {"/sys", "/host/sys"}, "cgroup": {"/sys/fs/cgroup", "/host/sys/fs/cgroup"}}
	if name != "minimal" {
		wantMounts["pod-resources"] = [2]string{"/var/lib/kubelet/pod-resources", "/var/lib/kubelet/pod-resources"}
	}
	for vol, hp := range wantMounts {
		if host[vol] != hp[0] || mounts[vol].MountPath != hp[1] {
			t.Errorf("volume %s: host %q at %q, want %q at %q", vol, host[vol], mounts[vol].MountPath, hp[0], hp[1])
		}
	}
	return mounts, host
}

// checkGuestShares: the guests' shares (docs/vm.md): a writable hostPath
// at the same path, and the flags naming it, only when set.
func checkGuestShares(t *testing.T, name string, c corev1.Container, mounts map[string]corev1.VolumeMount, host map[string]string) {
	t.Helper()
	if name == "everything" {
		if m := mounts["guest-shares"]; host["guest-shares"] != "/var/lib/wattrace/guests" || m.MountPath != "/var/lib/wattrace/guests" || m.ReadOnly {
			t.Errorf("guest-shares: host %q at %q read-only %v, want /var/lib/wattrace/guests at the same path, writable", host["guest-shares"], m.MountPath, m.ReadOnly)
		}
		args := strings.Join(c.Args, " ")
		if !strings.Contains(args, "--guests.share.path=/var/lib/wattrace/guests") || !strings.Contains(args, "--guests.share.interval=2s") {
			t.Errorf("args %q lack the guests.share flags", args)
		}
	} else if _, ok := host["guest-shares"]; ok || strings.Contains(strings.Join(c.Args, " "), "guests.share") {
		t.Errorf("%s: guest shares configured though guestShares.hostPath is empty", name)
	}
}

// checkExporterArgs: the host paths and listen address always; the
// kubelet URL and the GPU pod-resources socket unless minimal; the web
// config only with everything.
func checkExporterArgs(t *testing.T, name string, argv []string) {
	t.Helper()
	args := strings.Join(argv, " ")
	for _, a := range []string{"--path.procfs=/host/proc", "--path.sysfs=/host/sys", "--path.cgroupfs=/host/sys/fs/cgroup", "--web.listen-address=:9841"} {
		if !strings.Contains(args, a) {
			t.Errorf("args %q lack %s", args, a)
		}
	}
	for _, f := range []struct {
		what, flag string
		want       bool
	}{
		{"kubelet URL", "--workload.kube.url=https://$(NODE_IP):10250/pods", name != "minimal"},
		{"GPU pod-resources socket", "--gpu.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock", name != "minimal"},
		{"web config", "--web.config.file=/etc/wattrace/web/web-config.yml", name == "everything"},
	} {
		if present := strings.Contains(args, f.flag); present != f.want {
			t.Errorf("args %q: %s present = %v", args, f.what, present)
		}
	}
}

// checkExporterProbes: liveness /-/healthy and readiness /-/ready on the
// metrics port, over HTTPS when the web config is set.
func checkExporterProbes(t *testing.T, name string, c corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, "/-/healthy"}, {c.ReadinessProbe, "/-/ready"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.StrVal != "metrics" {
			t.Errorf("probe %+v, want httpGet %s on port metrics", p.probe, p.path)
			continue
		}
		if want := map[bool]corev1.URIScheme{true: corev1.URISchemeHTTPS, false: corev1.URISchemeHTTP}[name == "everything"]; p.probe.HTTPGet.Scheme != want {
			t.Errorf("probe %s scheme %s, want %s", p.path, p.probe.HTTPGet.Scheme, want)
		}
	}
}

// checkExporterResources: docs/performance.md: 46-47 MiB RSS, about 0.5%
// of a core at 1,000 cgroups.
func checkExporterResources(t *testing.T, r corev1.ResourceRequirements) {
	t.Helper()
	req := r.Requests
	if !req.Cpu().Equal(resource.MustParse("10m")) || !req.Memory().Equal(resource.MustParse("64Mi")) {
		t.Errorf("requests %v, want cpu 10m, memory 64Mi", req)
	}
	if r.Limits.Cpu().Value() != 0 || !r.Limits.Memory().Equal(resource.MustParse("256Mi")) {
		t.Errorf("limits %v, want no cpu limit, memory 256Mi", r.Limits)
	}
}
func checkRBAC(t *testing.T, objs []object) {
	t.Helper()
	role := find[*rbacv1.ClusterRole](t, objs)
	if len(role.Rules) != 1 || fmt.Sprint(role.Rules[0].Resources, role.Rules[0].Verbs) != "[nodes/proxy] [get]" {
		t.Errorf("cluster role rules %+v, want get on nodes/proxy only", role.Rules)
	}
	binding := find[*rbacv1.ClusterRoleBinding](t, objs)
	sa := find[*corev1.ServiceAccount](t, objs)
	ds := find[*appsv1.DaemonSet](t, objs)
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != sa.Name ||
		binding.Subjects[0].Namespace != "wattrace" || ds.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("binding %+v does not bind role %s to the DaemonSet's account %s", binding, role.Name, sa.Name)
	}
}

func checkMonitors(t *testing.T, objs []object) {
	t.Helper()
	svc := find[*corev1.Service](t, objs)
	ds := find[*appsv1.DaemonSet](t, objs)
	sm := find[*monitoringv1.ServiceMonitor](t, objs)
	pm := find[*monitoringv1.PodMonitor](t, objs)
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, the Service has %q", k, v, svc.Labels[k])
		}
	}
	for k, v := range pm.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("PodMonitor selects %s=%s, the pods have %q", k, v, ds.Spec.Template.Labels[k])
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Scheme == nil ||
		string(*sm.Spec.Endpoints[0].Scheme) != "https" || sm.Spec.Endpoints[0].BasicAuth == nil ||
		sm.Spec.Endpoints[0].BasicAuth.Password.Name != "wattrace-scrape" {
		t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port == nil || *pm.Spec.PodMetricsEndpoints[0].Port != "metrics" {
		t.Errorf("PodMonitor endpoints %+v", pm.Spec.PodMetricsEndpoints)
	}
}

// The committed plain manifests are what render.sh makes from the chart now.
func TestManifestsCurrent(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("sh", "../kubernetes/render.sh", out)
	cmd.Env = append(os.Environ(), "HELM="+helm(t))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("render.sh: %v\n%s", err, b)
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	if len(files) != 3 {
		t.Fatalf("render.sh wrote %d files, want 3", len(files))
	}
	for _, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		committed := filepath.Join("../kubernetes", filepath.Base(f))
		got, err := os.ReadFile(committed)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what the chart renders (%v): run make manifests", committed, err)
			continue
		}
		// And each decodes strictly too.
		if objs := decodeAll(t, string(got)); len(objs) == 0 {
			t.Errorf("%s holds no object", committed)
		}
	}
}

// The gpu switch (docs/gpu.md): the pod runs under the NVIDIA runtime
// class with NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES=utility
// (so the runtime mounts NVML and the device nodes), gains SYS_PTRACE for
// other users' fdinfo and environ, and reads Slurm's GPUs when asked;
// rendered objects decode strictly. The defaults have none of it.
func TestHelmGPUSwitch(t *testing.T) {
	set := []string{"--set", "gpu.enabled=true", "--set", "gpu.slurm=true"}
	out := runHelm(t, append([]string{"lint", "--strict", chart}, set...)...)
	if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") || strings.Contains(out, "[WARNING]") {
		t.Errorf("helm lint with the gpu switch:\n%s", out)
	}
	for _, on := range []bool{true, false} {
		var objs []object
		if on {
			objs = render(t, set)
		} else {
			objs = render(t, nil)
		}
		pod := find[*appsv1.DaemonSet](t, objs).Spec.Template.Spec
		c := pod.Containers[0]
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		caps := fmt.Sprint(c.SecurityContext.Capabilities.Add)
		args := strings.Join(c.Args, " ")
		if !on {
			if pod.RuntimeClassName != nil || env["NVIDIA_VISIBLE_DEVICES"] != "" || strings.Contains(caps, "SYS_PTRACE") || strings.Contains(args, "--gpu.slurm") {
				t.Errorf("defaults: runtime class %v, env %v, capabilities %s, args %q", pod.RuntimeClassName, env, caps, args)
			}
			continue
		}
		if pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia" {
			t.Errorf("runtimeClassName %v, want nvidia", pod.RuntimeClassName)
		}
		if env["NVIDIA_VISIBLE_DEVICES"] != "all" || env["NVIDIA_DRIVER_CAPABILITIES"] != "utility" {
			t.Errorf("env %v, want NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=utility", env)
		}
		if caps != "[BPF PERFMON DAC_READ_SEARCH SYS_PTRACE]" || fmt.Sprint(c.SecurityContext.Capabilities.Drop) != "[ALL]" {
			t.Errorf("capabilities %+v, want drop ALL, add BPF PERFMON DAC_READ_SEARCH SYS_PTRACE", c.SecurityContext.Capabilities)
		}
		if sc := c.SecurityContext; sc.Privileged == nil || *sc.Privileged || *sc.AllowPrivilegeEscalation {
			t.Errorf("security context %+v: the gpu switch must not make the pod privileged", sc)
		}
		if !strings.Contains(args, "--gpu.slurm") {
			t.Errorf("args %q lack --gpu.slurm", args)
		}
	}
}

// checkUnitsAPI: one replica that lets go of the SQLite file before the
// next starts, unprivileged with a read-only root, the store on the
// volume, the config from the ConfigMap, /health probes, the Service on
// the pod's port.
func checkUnitsAPI(t *testing.T, objs []object) {
	t.Helper()
	d := find[*appsv1.Deployment](t, objs)
	pod := d.Spec.Template.Spec
	c := checkUnitsAPIPod(t, d)
	checkUnitsAPIContainer(t, c)
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	checkUnitsAPIConfig(t, find[*corev1.ConfigMap](t, objs), mounts)
	if mounts["config"] != "/etc/wattrace-api/config" || mounts["tokens"] != "/etc/wattrace-api/tokens" || mounts["tmp"] != "/tmp" {
		t.Errorf("mounts %v", mounts)
	}
	checkUnitsAPIClaim(t, pod, find[*corev1.PersistentVolumeClaim](t, objs))
	checkUnitsAPIService(t, objs, d)
}

// checkUnitsAPIPod: one replica, recreated rather than rolled, the pod not
// root, one container (returned).
func checkUnitsAPIPod(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("replicas %v strategy %s, want 1 and Recreate", d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	pod := d.Spec.Template.Spec
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("pod security context %+v: want runAsNonRoot", pod.SecurityContext)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	return pod.Containers[0]
}

// checkUnitsAPIContainer: a read-only root, no escalation, no
// capabilities; the config, listen address and web config in the args;
// the probes on /health over HTTPS.
func checkUnitsAPIContainer(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || fmt.Sprint(sc.Capabilities.Drop) != "[ALL]" || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container security context %+v", sc)
	}
	args := strings.Join(c.Args, " ")
	for _, a := range []string{"--config.file=/etc/wattrace-api/config/config.yaml", "--web.listen-address=:9842",
		"--web.config.file=/etc/wattrace-api/web/web-config.yml"} {
		if !strings.Contains(args, a) {
			t.Errorf("args %q lack %s", args, a)
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.StrVal != "http" || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe %+v, want https /health on port http", p)
		}
	}
}

// checkUnitsAPIConfig: the ConfigMap's config.yaml puts the store on the
// data volume (mounted as mounts says), trusts Grafana as a proxy
// principal and no address, names a TSDB, and carries the guard's values.
func checkUnitsAPIConfig(t *testing.T, cm *corev1.ConfigMap, mounts map[string]string) {
	t.Helper()
	var cfg struct {
		Store struct{ Driver, Path string }
		API   map[string]any `json:"api"`
		TSDB  struct{ URL string }
		Guard map[string]any `json:"guard"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("config.yaml: %v\n%s", err, cm.Data["config.yaml"])
	}
	if cfg.Store.Driver != "sqlite" || !strings.HasPrefix(cfg.Store.Path, mounts["data"]+"/") || mounts["data"] == "" {
		t.Errorf("store %+v is not on the data volume (mounted at %q)", cfg.Store, mounts["data"])
	}
	// Grafana is a proxy principal (its basic-auth user), and no address
	// range is trusted: a pod network there would let any pod claim any
	// user.
	if fmt.Sprint(cfg.API["proxies"]) != "[grafana]" || fmt.Sprint(cfg.API["trusted-proxies"]) != "[]" ||
		cfg.API["user-header"] != "X-Grafana-User" || cfg.TSDB.URL == "" {
		t.Errorf("config %+v", cfg)
	}
	// The guard's values become wattrace-api's guard.* keys.
	if g := cfg.Guard; g["upstream"] != "http://prometheus-operated.monitoring:9090" || fmt.Sprint(g["public"]) != "[wattrace_node_.*]" ||
		g["cluster-label"] != "cluster" || fmt.Sprint(g["max-query-length"]) != "16384" || g["timeout"] != "2m" || g["families"] != nil {
		t.Errorf("guard config %v", g)
	}
}

// checkUnitsAPIClaim: the data volume is the rendered claim.
func checkUnitsAPIClaim(t *testing.T, pod corev1.PodSpec, pvc *corev1.PersistentVolumeClaim) {
	t.Helper()
	claimed := false
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name && v.Name == "data" {
			claimed = true
		}
	}
	if !claimed {
		t.Errorf("the data volume does not use the claim %s", pvc.Name)
	}
}

// checkUnitsAPIService: the API's Service selects the Deployment's pods
// and serves port 9842 from the pod's http port.
func checkUnitsAPIService(t *testing.T, objs []object, d *appsv1.Deployment) {
	t.Helper()
	for _, o := range objs {
		svc, ok := o.v.(*corev1.Service)
		if !ok || !strings.HasSuffix(svc.Name, "-api") {
			continue
		}
		for k, v := range svc.Spec.Selector {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("API Service selects %s=%s, the pod has %q", k, v, d.Spec.Template.Labels[k])
			}
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9842 || svc.Spec.Ports[0].TargetPort.StrVal != "http" {
			t.Errorf("API Service ports %+v", svc.Spec.Ports)
		}
		return
	}
	t.Error("no API Service")
}
