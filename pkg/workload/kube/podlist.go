package kube

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// podList is the part of a v1 PodList we read. The kubelet's /pods and the
// API server's /api/v1/pods return the same shape.
type podList struct {
	Items []struct {
		Metadata struct {
			UID         string            `json:"uid"`
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Status struct {
			QOSClass                   string            `json:"qosClass"`
			ContainerStatuses          []containerStatus `json:"containerStatuses"`
			InitContainerStatuses      []containerStatus `json:"initContainerStatuses"`
			EphemeralContainerStatuses []containerStatus `json:"ephemeralContainerStatuses"`
		} `json:"status"`
	} `json:"items"`
}

type containerStatus struct {
	Name        string `json:"name"`
	ContainerID string `json:"containerID"`
	LastState   struct {
		Terminated *struct {
			ContainerID string `json:"containerID"`
		} `json:"terminated"`
	} `json:"lastState"`
}

// mirrorAnnotation holds, on the API server's copy of a static pod, the uid
// the kubelet uses, which is the one in the cgroup path.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// decodePods indexes a PodList by pod uid.
func decodePods(r io.Reader) (map[string]Pod, error) {
	var l podList
	if err := json.NewDecoder(r).Decode(&l); err != nil {
		return nil, fmt.Errorf("decode pod list: %w", err)
	}
	pods := make(map[string]Pod, len(l.Items))
	for _, it := range l.Items {
		p := Pod{
			UID:        it.Metadata.UID,
			Name:       it.Metadata.Name,
			Namespace:  it.Metadata.Namespace,
			QoS:        strings.ToLower(it.Status.QOSClass),
			Containers: map[string]Container{},
		}
		for _, list := range [][]containerStatus{it.Status.ContainerStatuses, it.Status.InitContainerStatuses, it.Status.EphemeralContainerStatuses} {
			for _, cs := range list {
				// A restarted container's previous instance may still
				// have a cgroup being torn down, or energy retained.
				ids := []string{cs.ContainerID}
				if t := cs.LastState.Terminated; t != nil {
					ids = append(ids, t.ContainerID)
				}
				for _, ref := range ids {
					if rt, id, ok := splitContainerID(ref); ok {
						p.Containers[id] = Container{Name: cs.Name, Runtime: rt}
					}
				}
			}
		}
		if p.UID != "" {
			pods[p.UID] = p
		}
		if m := it.Metadata.Annotations[mirrorAnnotation]; m != "" && m != p.UID {
			pods[m] = p
		}
	}
	return pods, nil
}

// splitContainerID splits "containerd://<id>" into a runtime name as
// wattrace spells managers (containerd, crio, docker) and the id.
func splitContainerID(ref string) (runtime, id string, ok bool) {
	scheme, id, ok := strings.Cut(ref, "://")
	if !ok || id == "" {
		return "", "", false
	}
	switch scheme {
	case "cri-o":
		scheme = "crio"
	}
	return scheme, id, true
}
