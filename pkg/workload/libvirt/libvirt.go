// Package libvirt finds libvirt QEMU domains by what a cgroup path says about
// them (run-time domain id and the machine name systemd or libvirt derived
// from the domain name) in libvirt's XML files, and reads a QEMU command
// line for the name and uuid when no XML is readable.
package libvirt

import (
	"strconv"
	"strings"
)

// Domain is one libvirt domain.
type Domain struct {
	Name string
	UUID string
	// ID is the run-time domain id from a status file (<domstatus>), 0 when
	// the file does not say (persistent definitions, stopped domains).
	ID int
	// DisplayName is OpenStack Nova's name for the instance
	// (<metadata><nova:instance><nova:name>), "" elsewhere.
	DisplayName string
	// VCPUs is the domain's <vcpu> and MemoryKiB its <memory>, what it
	// was allocated; 0 when the XML does not say (or says something
	// implausible).
	VCPUs     int
	MemoryKiB uint64
	// VsockCID is the guest's vsock context id (<devices><vsock><cid
	// address='N'/>), as a running domain's status file gives it (libvirt
	// writes the id it assigned there when the XML says auto); 0 when the
	// domain has no vsock device or the id is not a guest's (0 to 2 are
	// reserved, 2^32-1 means any).
	VsockCID uint32
	// File is the XML file the domain was read from.
	File string
}

// maxMachineName is libvirt's cap on a machine name, which is also the name
// in the systemd scope and the cgroupfs directory (virDomainMachineNameAppendValid).
const maxMachineName = 64

// MachineName returns the machine name libvirt gives a QEMU domain with this
// run-time id and name: "qemu-<id>-" and the name with every character
// other than [A-Za-z0-9-.] dropped, runs of '-' and '.' collapsed to their
// first, the whole capped at 64 bytes and trailing '-' and '.' trimmed.
// legacy selects the rule of libvirt before 6.x, which let a dropped
// character end a run of separators ("a-_-b" gives "a--b" there, "a-b" now).
func MachineName(id int, name string, legacy bool) string {
	var b strings.Builder
	b.WriteString("qemu-")
	b.WriteString(strconv.Itoa(id))
	b.WriteByte('-')
	skip := true
	for i := 0; i < len(name); i++ {
		if b.Len() >= maxMachineName {
			break
		}
		c := name[i]
		if c == '.' || c == '-' {
			if !skip {
				b.WriteByte(c)
			}
			skip = true
			continue
		}
		if legacy {
			skip = false
		}
		if !hostnameChar(c) {
			continue
		}
		b.WriteByte(c)
		skip = false
	}
	return strings.TrimRight(b.String(), "-.")
}

func hostnameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// ParseCmdline returns the guest name and uuid from a QEMU command line as
// read from /proc/<pid>/cmdline (arguments separated by NUL bytes). It
// understands "-name guest=<name>,debug-threads=on" (libvirt since 1.2.x),
// the older "-name <name>[,process=…]" and "-uuid <uuid>"; QEMU accepts
// each with one or two leading dashes. In option values ",," stands for ",".
func ParseCmdline(cmdline []byte) (name, uuid string) {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	for i := 0; i+1 < len(args); i++ {
		switch strings.TrimPrefix(args[i], "-") {
		case "-name", "name":
			name = guestName(args[i+1])
			i++
		case "-uuid", "uuid":
			uuid = args[i+1]
			i++
		}
	}
	return name, uuid
}

// guestName returns the guest= property of a -name value, or its first
// (implicit) property when it has none.
func guestName(v string) string {
	props := splitOpts(v)
	for _, p := range props {
		if g, ok := strings.CutPrefix(p, "guest="); ok {
			return g
		}
	}
	if len(props) > 0 && !strings.Contains(props[0], "=") {
		return props[0]
	}
	return ""
}

// splitOpts splits a QEMU option string at single commas; ",," is a comma.
func splitOpts(v string) []string {
	var out []string
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == ',' {
			if i+1 < len(v) && v[i+1] == ',' {
				b.WriteByte(',')
				i++
				continue
			}
			out = append(out, b.String())
			b.Reset()
			continue
		}
		b.WriteByte(v[i])
	}
	return append(out, b.String())
}
