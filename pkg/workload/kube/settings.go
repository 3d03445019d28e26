package kube

import (
	"time"

	"github.com/wattrace/wattrace/internal/setting"
)

// Declare declares the workload.kube.* settings, bound to c: the
// kubelet's URL, its credentials and the refresh period. The other
// fields keep their defaults.
func (c *Config) Declare(s *setting.Set) {
	s.String(&c.URL, "workload.kube.url", "", "Kubelet pods endpoint for pod and container names, e.g. https://$(NODE_IP):10250/pods. Empty: names come from cgroup paths only.")
	s.String(&c.TokenFile, "workload.kube.token-file", "/var/run/secrets/kubernetes.io/serviceaccount/token", "Bearer token file for the kubelet.")
	s.String(&c.CAFile, "workload.kube.ca-file", "", "CA file for the kubelet's certificate. Empty: the system roots.")
	s.Bool(&c.InsecureSkipVerify, "workload.kube.insecure-skip-verify", false, "Skip verifying the kubelet's certificate (often self-signed).")
	s.Duration(&c.Refresh, "workload.kube.refresh", 30*time.Second, "How often the pod list is refreshed (and at most how stale names are).")
}
