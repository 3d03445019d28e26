package libvirt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// domainXML holds the few elements of a <domain> we use. The Nova element
// is matched by local name: encoding/xml ignores the namespace of a field
// tag that names none, and Nova's namespace URI carries a version.
type domainXML struct {
	ID     string `xml:"id,attr"`
	Name   string `xml:"name"`
	UUID   string `xml:"uuid"`
	VCPU   string `xml:"vcpu"`
	Memory struct {
		Unit  string `xml:"unit,attr"`
		Value string `xml:",chardata"`
	} `xml:"memory"`
	Metadata struct {
		Nova struct {
			Name string `xml:"name"`
		} `xml:"instance"`
	} `xml:"metadata"`
	Devices struct {
		Vsock struct {
			CID struct {
				Address string `xml:"address,attr"`
			} `xml:"cid"`
		} `xml:"vsock"`
		Hostdevs []struct {
			Type   string `xml:"type,attr"`
			Source struct {
				Address struct {
					Domain   string `xml:"domain,attr"`
					Bus      string `xml:"bus,attr"`
					Slot     string `xml:"slot,attr"`
					Function string `xml:"function,attr"`
					UUID     string `xml:"uuid,attr"`
				} `xml:"address"`
			} `xml:"source"`
		} `xml:"hostdev"`
	} `xml:"devices"`
}

// parseDomainInto reads a persistent definition (root <domain>, as under
// /etc/libvirt/qemu) or a status file (root <domstatus> wrapping the live
// <domain>, as under /run/libvirt/qemu, where the id attribute is set),
// and its host devices into devs when devs is not nil.
func parseDomainInto(r io.Reader, devs *Devices) (Domain, error) {
	dec := xml.NewDecoder(r)
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return Domain{}, errors.New("no <domain> or <domstatus> element")
			}
			return Domain{}, fmt.Errorf("parse domain XML: %w", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch se.Name.Local {
		case "domain":
			return decodeDomain(dec, se, devs)
		case "domstatus":
			// Descend: the <domain> is a child, after elements we skip.
			continue
		default:
			if err := dec.Skip(); err != nil {
				return Domain{}, fmt.Errorf("parse domain XML: %w", err)
			}
		}
	}
}

// Devices are the host devices a domain holds: the PCI addresses
// ("0000:3b:00.0") passed through (<hostdev type='pci'>) and the UUIDs of
// its mediated devices (<hostdev type='mdev'>, vGPU slices).
type Devices struct {
	Hostdevs, Mdevs []string
}

// ParseDomainDevices reads a domain XML or status file like the catalog
// does and also returns its host devices.
func ParseDomainDevices(r io.Reader) (Domain, Devices, error) {
	var devs Devices
	d, err := parseDomainInto(r, &devs)
	return d, devs, err
}

func parseDomain(r io.Reader) (Domain, error) { return parseDomainInto(r, nil) }

func decodeDomain(dec *xml.Decoder, se xml.StartElement, devs *Devices) (Domain, error) {
	var x domainXML
	if err := dec.DecodeElement(&x, &se); err != nil {
		return Domain{}, fmt.Errorf("parse <domain>: %w", err)
	}
	d := Domain{
		Name:        strings.TrimSpace(x.Name),
		UUID:        strings.ToLower(strings.TrimSpace(x.UUID)),
		DisplayName: strings.TrimSpace(x.Metadata.Nova.Name),
		VCPUs:       vcpus(x.VCPU),
		MemoryKiB:   memoryKiB(x.Memory.Value, x.Memory.Unit),
		VsockCID:    vsockCID(x.Devices.Vsock.CID.Address),
	}
	if d.Name == "" {
		return Domain{}, errors.New("<domain> without <name>")
	}
	for _, h := range x.Devices.Hostdevs {
		if devs == nil {
			break
		}
		a := h.Source.Address
		switch h.Type {
		case "pci":
			if addr, ok := pciAddress(a.Domain, a.Bus, a.Slot, a.Function); ok {
				devs.Hostdevs = append(devs.Hostdevs, addr)
			}
		case "mdev":
			if u := strings.ToLower(strings.TrimSpace(a.UUID)); u != "" {
				devs.Mdevs = append(devs.Mdevs, u)
			}
		}
	}
	// Status files of running domains carry the id; -1 marks an inactive
	// definition.
	if n, err := strconv.Atoi(x.ID); err == nil && n > 0 {
		d.ID = n
	}
	return d, nil
}

// pciAddress formats a <hostdev> source address (attributes in hex, "0x"
// prefixed as libvirt writes them) as "dddd:bb:ss.f".
func pciAddress(dom, bus, slot, fn string) (string, bool) {
	var v [4]uint64
	for i, s := range []string{dom, bus, slot, fn} {
		s = strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "0x")
		if s == "" && i == 0 {
			continue // domain defaults to 0
		}
		n, err := strconv.ParseUint(s, 16, 32)
		if err != nil {
			return "", false
		}
		v[i] = n
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", v[0], v[1], v[2], v[3]), true
}

// maxVCPUs bounds a domain's <vcpu>: more is not a count QEMU accepts, so a
// file claiming it is read as not saying.
const maxVCPUs = 16384

// vcpus reads <vcpu> (the maximum vCPUs allocated); 0 when absent or not a
// plausible count.
func vcpus(s string) int {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > maxVCPUs {
		return 0
	}
	return n
}

// memoryUnits are libvirt's <memory unit=…> multipliers to bytes (KiB
// when the attribute is absent).
var memoryUnits = map[string]float64{
	"b": 1, "bytes": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1e3, "m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9, "t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// maxMemoryKiB bounds a domain's memory (16 PiB): a larger figure is a
// broken file, read as not saying.
const maxMemoryKiB = 1 << 44

// memoryKiB reads <memory> in KiB; 0 when absent, of an unknown unit or not
// a plausible size.
func memoryKiB(v, unit string) uint64 {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil || n == 0 {
		return 0
	}
	u := strings.ToLower(strings.TrimSpace(unit))
	if u == "" {
		u = "kib"
	}
	mul, ok := memoryUnits[u]
	if !ok {
		return 0
	}
	kib := float64(n) * mul / 1024
	if kib < 1 || kib > maxMemoryKiB {
		return 0
	}
	return uint64(kib)
}

// vsockCID is a <cid address> that names a guest: 3 to 2^32-2 (0 to 2
// are the hypervisor, local and host ids; 2^32-1 is "any"); 0 otherwise.
func vsockCID(v string) uint32 {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 32)
	if err != nil || n < 3 || n == 1<<32-1 {
		return 0
	}
	return uint32(n)
}
