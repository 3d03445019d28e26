package sysfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// kfdNode is one node of the kernel's KFD topology
// (<sysfs>/class/kfd/kfd/topology/nodes/N): a CPU, a GPU, or on an APU
// both in one node.
type kfdNode struct {
	// GPUID is the node's gpu_id, the <gpuid> of the per-process
	// stats_<gpuid> directories; 0 for a CPU-only node.
	GPUID uint64
	// PCI is the GPU's address, from the node's domain and location_id
	// (bus << 8 | devfn).
	PCI string
	// APU: the node has CPU cores and SIMDs, the CPU and GPU of one
	// package sharing one power sensor.
	APU bool
	// CUs is the GPU's compute units (simd_count / simd_per_cu).
	CUs float64
}

// kfdTopology reads the KFD topology's GPU nodes by PCI address. A host
// without KFD (no /sys/class/kfd) has none.
func kfdTopology(sysfsRoot string) map[string]kfdNode {
	out := map[string]kfdNode{}
	dirs, _ := filepath.Glob(filepath.Join(sysfsRoot, "class", "kfd", "kfd", "topology", "nodes", "*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "properties"))
		if err != nil {
			continue
		}
		props := map[string]uint64{}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 {
				if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
					props[f[0]] = v
				}
			}
		}
		if props["simd_count"] == 0 {
			continue // a CPU node
		}
		loc := props["location_id"]
		n := kfdNode{
			PCI: fmt.Sprintf("%04x:%02x:%02x.%x", props["domain"], loc>>8, (loc&0xff)>>3, loc&7),
			APU: props["cpu_cores_count"] > 0,
		}
		if per := props["simd_per_cu"]; per > 0 {
			n.CUs = float64(props["simd_count"]) / float64(per)
		}
		n.GPUID, _ = strconv.ParseUint(strings.TrimSpace(readStr(filepath.Join(d, "gpu_id"))), 10, 64)
		out[n.PCI] = n
	}
	return out
}

// APUs lists the PCI addresses of the node's AMD APUs: an APU's amdgpu
// power sensor reports the whole socket, CPU included ("On APUs this
// includes the CPU", amdgpu's hwmon documentation), which RAPL's package
// zone already counts, so neither the GPU stage nor the hwmon meter may
// count it as a GPU.
func APUs(sysfsRoot string) []string {
	var out []string
	for pci, n := range kfdTopology(sysfsRoot) {
		if n.APU {
			out = append(out, pci)
		}
	}
	return out
}

// kfdUsage reads each KFD process's compute use of the GPUs in nodes
// (<sysfs>/class/kfd/kfd/proc/<pid>/stats_<gpuid>/cu_occupancy: the
// compute units its waves occupy when read) and adds to into[pci][pid]
// the occupied share of the GPU × dt in nanoseconds, comparable with DRM
// clients' busy nanoseconds. It returns how many processes use a GPU
// (a vram_<gpuid> or stats_<gpuid> entry) without a cu_occupancy the
// kernel can give (older kernels, ASICs without it): their compute is
// not attributable.
func kfdUsage(sysfsRoot string, nodes map[string]kfdNode, dt time.Duration, into map[string]map[int]float64) (unattributable int) {
	procs, _ := os.ReadDir(filepath.Join(sysfsRoot, "class", "kfd", "kfd", "proc"))
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid <= 0 {
			continue
		}
		dir := filepath.Join(sysfsRoot, "class", "kfd", "kfd", "proc", p.Name())
		for pci, n := range nodes {
			if n.GPUID == 0 || n.APU {
				continue
			}
			id := strconv.FormatUint(n.GPUID, 10)
			b, err := os.ReadFile(filepath.Join(dir, "stats_"+id, "cu_occupancy"))
			if err != nil {
				if exists(filepath.Join(dir, "vram_"+id)) || exists(filepath.Join(dir, "stats_"+id)) {
					unattributable++
				}
				continue
			}
			occ, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
			if err != nil || !(occ >= 0) || (n.CUs > 0 && occ > n.CUs) || n.CUs <= 0 {
				unattributable++
				continue
			}
			if occ > 0 && dt > 0 {
				if into[pci] == nil {
					into[pci] = map[int]float64{}
				}
				into[pci][pid] += occ / n.CUs * float64(dt.Nanoseconds())
			}
		}
	}
	return unattributable
}
