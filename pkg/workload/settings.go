package workload

import (
	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/workload/libvirt"
)

// Declare declares workload.libvirt.dirs, bound to o.LibvirtDirs; the
// rest of o is the exporter's to set (the roots, the kubelet client).
func (o *Options) Declare(s *setting.Set) {
	s.Strings(&o.LibvirtDirs, "workload.libvirt.dirs", libvirt.DefaultDirs, "Directories of libvirt domain XML, for VM names and UUIDs. Repeatable.")
}
