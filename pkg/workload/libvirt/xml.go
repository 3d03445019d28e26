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
	ID       string `xml:"id,attr"`
	Name     string `xml:"name"`
	UUID     string `xml:"uuid"`
	Metadata struct {
		Nova struct {
			Name string `xml:"name"`
		} `xml:"instance"`
	} `xml:"metadata"`
}

// parseDomain reads a persistent definition (root <domain>, as under
// /etc/libvirt/qemu) or a status file (root <domstatus> wrapping the live
// <domain>, as under /run/libvirt/qemu, where the id attribute is set).
func parseDomain(r io.Reader) (Domain, error) {
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
			return decodeDomain(dec, se)
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

func decodeDomain(dec *xml.Decoder, se xml.StartElement) (Domain, error) {
	var x domainXML
	if err := dec.DecodeElement(&x, &se); err != nil {
		return Domain{}, fmt.Errorf("parse <domain>: %w", err)
	}
	d := Domain{
		Name:        strings.TrimSpace(x.Name),
		UUID:        strings.ToLower(strings.TrimSpace(x.UUID)),
		DisplayName: strings.TrimSpace(x.Metadata.Nova.Name),
	}
	if d.Name == "" {
		return Domain{}, errors.New("<domain> without <name>")
	}
	// Status files of running domains carry the id; -1 marks an inactive
	// definition.
	if n, err := strconv.Atoi(x.ID); err == nil && n > 0 {
		d.ID = n
	}
	return d, nil
}
