package alloc

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultPodResourcesSocket is the kubelet's pod-resources endpoint.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// gpuResource matches the extended resources of the GPU device plugins:
// nvidia.com/gpu, nvidia.com/mig-1g.5gb, amd.com/gpu, gpu.intel.com/i915,
// gpu.intel.com/xe. Time-sliced NVIDIA GPUs keep the resource name and
// give ids "<uuid>::<replica>".
var gpuResource = regexp.MustCompile(`^(nvidia\.com/(gpu|mig-.+)|amd\.com/gpu|gpu\.intel\.com/(i915|xe))$`)

var pciID = regexp.MustCompile(`^([0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)
var intelCard = regexp.MustCompile(`^card([0-9]+)(-[0-9]+)?$`)

// Kubelet reads pod GPU allocations from the kubelet's pod-resources API
// (v1 List) over its unix socket.
type Kubelet struct {
	conn    *grpc.ClientConn
	client  podresources.PodResourcesListerClient
	timeout time.Duration
}

// NewKubelet connects lazily to the socket at path (gRPC dials on first
// use, so a kubelet that starts later is found then).
func NewKubelet(path string, timeout time.Duration) (*Kubelet, error) {
	if path == "" {
		path = DefaultPodResourcesSocket
	}
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %s: %w", path, err)
	}
	return &Kubelet{conn: conn, client: podresources.NewPodResourcesListerClient(conn), timeout: timeout}, nil
}

func (k *Kubelet) Name() string { return "kubernetes" }
func (k *Kubelet) Close() error { return k.conn.Close() }

// Allocations lists every container's GPU devices.
func (k *Kubelet) Allocations(ctx context.Context) ([]Allocation, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	resp, err := k.client.List(ctx, &podresources.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod-resources List: %w", err)
	}
	var out []Allocation
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			h := reading.Holder{Kind: reading.HolderPod, Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName()}
			for _, d := range c.GetDevices() {
				if !gpuResource.MatchString(d.GetResourceName()) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					if r, ok := refFromPluginID(id); ok {
						out = append(out, Allocation{Device: r, Holder: h})
					}
				}
			}
		}
	}
	return out, nil
}

// refFromPluginID reads a device plugin's device id: an NVIDIA UUID
// (possibly "::<replica>" under time-slicing), a PCI address (AMD), or
// Intel's "card<N>[-<share>]".
func refFromPluginID(id string) (Ref, bool) {
	id, _, _ = strings.Cut(strings.TrimSpace(id), "::")
	switch {
	case strings.HasPrefix(id, "GPU-") || strings.HasPrefix(id, "MIG-"):
		return Ref{UUID: id}, true
	case pciID.MatchString(id):
		return Ref{PCI: id}, true
	}
	if m := intelCard.FindStringSubmatch(id); m != nil {
		return Ref{Index: m[1]}, true
	}
	return Ref{}, false
}
