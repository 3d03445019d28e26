package alloy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/profiling"
	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, profiling.DefaultEnvVar+"=") {
			env = append(env, kv)
		}
	}
	return env
}

func startBusy(t *testing.T, extra ...string) int {
	t.Helper()
	cmd := exec.Command(testenv.Busy[0], testenv.Busy[1:]...)
	cmd.Env = append(cleanEnv(), extra...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start busy process: %v", err)
	}
	t.Cleanup(func() { testenv.Kill(cmd) })
	return cmd.Process.Pid
}

func get(t *testing.T, h http.Handler, method string) (*http.Response, []byte) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(method, srv.URL+"/alloy-targets", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// decodeGroups checks the HTTP SD shape strictly: an array of objects with
// exactly "targets" (non-empty list of strings) and "labels" (object of
// strings), and returns them.
func decodeGroups(t *testing.T, body []byte) []Group {
	t.Helper()
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("body is not a JSON array of objects: %v\n%s", err, body)
	}
	groups := make([]Group, len(raw))
	for i, g := range raw {
		if len(g) != 2 || g["targets"] == nil || g["labels"] == nil {
			t.Fatalf("group %d has keys other than targets and labels: %s", i, body)
		}
		if err := json.Unmarshal(g["targets"], &groups[i].Targets); err != nil || len(groups[i].Targets) == 0 {
			t.Fatalf("group %d targets not a non-empty string list (%v): %s", i, err, g["targets"])
		}
		if err := json.Unmarshal(g["labels"], &groups[i].Labels); err != nil {
			t.Fatalf("group %d labels not a string map: %v", i, err)
		}
	}
	return groups
}

// TestServesOnlyOptedInProcess runs two identical busy processes that
// differ only by WATTRACE_PROFILE=1 and checks that /alloy-targets lists
// the one that opted in, in the shape discovery.http reads.
func TestServesOnlyOptedInProcess(t *testing.T) {
	in := startBusy(t, profiling.DefaultEnvVar+"=1")
	out := startBusy(t)
	filter, err := profiling.NewFilter([]string{profiling.DefaultEnvVar})
	if err != nil {
		t.Fatal(err)
	}
	job := &ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "4242", JobID: "4242", Step: "0", UID: "1000", User: "alice"}
	src := SourceFunc(func() []Target {
		return []Target{
			NewTarget(uint32(out), "sh", "/system.slice/other.scope", nil),
			NewTarget(uint32(in), "sh", "/system.slice/slurmstepd.scope/job_4242/step_0", job),
			// Exited since the snapshot: skipped, not an error.
			{PID: 1 << 30, Comm: "gone"},
		}
	})
	h, err := NewHandler(Config{Source: src, Filter: filter, Host: "node01"})
	if err != nil {
		t.Fatal(err)
	}

	resp, body := get(t, h, http.MethodGet)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	groups := decodeGroups(t, body)
	if len(groups) != 1 {
		t.Fatalf("%d target groups, want 1: %s", len(groups), body)
	}
	want := map[string]string{
		LabelPID:     strconv.Itoa(in),
		LabelService: "slurm/4242",
		LabelComm:    "sh",
		LabelCgroup:  "/system.slice/slurmstepd.scope/job_4242/step_0",
		"job_id":     "4242",
		"user":       "alice",
		"uid":        "1000",
	}
	g := groups[0]
	if len(g.Targets) != 1 || g.Targets[0] != "node01" {
		t.Errorf("targets %v, want [node01]", g.Targets)
	}
	if len(g.Labels) != len(want) {
		t.Errorf("labels %v, want %v", g.Labels, want)
	}
	for k, v := range want {
		if g.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, g.Labels[k], v)
		}
	}
}

func fakeEnviron(t *testing.T, root string, pid int, env string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "environ"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestHandlerDetails(t *testing.T) {
	root := t.TempDir()
	fakeEnviron(t, root, 30, "CEEMS_PROFILE=1\x00")
	fakeEnviron(t, root, 4, "WATTRACE_PROFILE=1\x00")
	fakeEnviron(t, root, 5, "WATTRACE_PROFILE=\x00")
	filter, err := profiling.NewFilter([]string{"WATTRACE_PROFILE", "CEEMS_PROFILE"})
	if err != nil {
		t.Fatal(err)
	}
	targets := []Target{
		{PID: 30, Comm: "b\xffad", Labels: map[string]string{
			"ok_label": "v", "9bad": "x", "bad-name": "x", "empty": "",
			LabelPID: "1", LabelService: "spoofed",
		}},
		{PID: 4},
		{PID: 5, Comm: "optedout"},
	}
	h, err := NewHandler(Config{Source: SourceFunc(func() []Target { return targets }), Filter: filter, ProcfsRoot: root, Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	groups := h.Groups()
	if len(groups) != 2 {
		t.Fatalf("groups %+v, want pids 4 and 30", groups)
	}
	if g := groups[0].Labels; g[LabelPID] != "4" || g[LabelService] != "pid-4" || len(g) != 2 {
		t.Errorf("first group %v, want pid 4 named pid-4 (sorted by pid, no comm)", g)
	}
	g := groups[1].Labels
	want := map[string]string{LabelPID: "30", LabelService: "b\uFFFDad", LabelComm: "b\uFFFDad", "ok_label": "v"}
	if len(g) != len(want) {
		t.Errorf("labels %v, want %v", g, want)
	}
	for k, v := range want {
		if g[k] != v {
			t.Errorf("label %s = %q, want %q", k, g[k], v)
		}
	}

	resp, _ := get(t, h, http.MethodPost)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d", resp.StatusCode)
	}
	resp, body := get(t, h, http.MethodHead)
	if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("HEAD: status %d, %d body bytes, type %q", resp.StatusCode, len(body), resp.Header.Get("Content-Type"))
	}

	// No opted-in process is an empty array, not null: discovery.http
	// rejects null.
	targets = nil
	_, body = get(t, h, http.MethodGet)
	if strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("empty target list served as %q, want []", body)
	}

	if _, err := NewHandler(Config{Filter: filter}); err == nil {
		t.Error("nil source accepted")
	}
	if _, err := NewHandler(Config{Source: SourceFunc(func() []Target { return nil })}); err == nil {
		t.Error("nil filter accepted")
	}
}

func TestServiceName(t *testing.T) {
	for _, tc := range []struct {
		id   ident.Identity
		want string
	}{
		{ident.Identity{Kind: ident.KindContainer, PodUID: "u1", Pod: "web-1", Namespace: "shop", Container: "nginx"}, "shop/nginx"},
		{ident.Identity{Kind: ident.KindContainer, PodUID: "u1", Pod: "web-1", Namespace: "shop", Container: ident.SandboxContainer}, "shop/web-1"},
		{ident.Identity{Kind: ident.KindPod, PodUID: "u2"}, "u2"},
		{ident.Identity{Kind: ident.KindContainer, ID: "0123456789abcdef0123"}, "0123456789ab"},
		{ident.Identity{Kind: ident.KindContainer, ID: "0123456789abcdef", Name: "db"}, "db"},
		{ident.Identity{Kind: ident.KindJob, JobID: "77", Step: "batch"}, "slurm/77"},
		{ident.Identity{Kind: ident.KindVM, ID: "uuid", VMName: "instance-00000001", Name: "web"}, "vm/web"},
		{ident.Identity{Kind: ident.KindVM, ID: "uuid", VMName: "dom1"}, "vm/dom1"},
		{ident.Identity{Kind: ident.KindSystemdUnit, ID: `foo\x2dbar.service`, Name: "foo-bar.service"}, "foo-bar.service"},
		{ident.Identity{Kind: ident.KindCgroup}, ""},
	} {
		if got := ident.ServiceName(tc.id); got != tc.want {
			t.Errorf("ServiceName(%+v) = %q, want %q", tc.id, got, tc.want)
		}
	}
	// NewTarget keeps the comm for a cgroup that is no workload and takes
	// every level's labels for one that is.
	if tg := NewTarget(1, "bash", "/user.slice", &ident.Identity{Kind: ident.KindCgroup}); tg.Service != "bash" || len(tg.Labels) != 0 {
		t.Errorf("plain cgroup target %+v", tg)
	}
	tg := NewTarget(2, "nginx", "/kubepods/pod-u1/c1", &ident.Identity{
		Kind: ident.KindContainer, Manager: ident.ManagerContainerd, ID: "c1", PodUID: "u1", Pod: "web-1", Namespace: "shop", Container: "nginx", QoS: "burstable"})
	want := map[string]string{"container_id": "c1", "container": "nginx", "pod": "web-1", "namespace": "shop", "manager": "containerd", "pod_uid": "u1", "qos": "burstable"}
	if len(tg.Labels) != len(want) || tg.Service != "shop/nginx" {
		t.Errorf("pod container target %+v, want labels %v", tg, want)
	}
	for k, v := range want {
		if tg.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, tg.Labels[k], v)
		}
	}
}
