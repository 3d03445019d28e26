package ipmi

import (
	"context"
	"fmt"
	"time"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Conn sends one IPMI request and returns the response data (completion
// code first). *Device is the production Conn.
type Conn interface {
	Do(ctx context.Context, req Request) ([]byte, error)
}

// DCMIMeter reads the node's power with DCMI Get Power Reading. It is a
// power.PowerReader (zone platform): wrap it with power.NewCached, since a
// BMC answers in tens to hundreds of milliseconds and updates about once a
// second.
type DCMIMeter struct {
	conn Conn
	name string
}

// NewDCMIMeter reads through conn; name is the source label ("ipmi").
func NewDCMIMeter(conn Conn) *DCMIMeter { return &DCMIMeter{conn: conn, name: "ipmi"} }

// Name implements power.PowerReader.
func (m *DCMIMeter) Name() string { return m.name }

// ReadPower implements power.PowerReader: the current power, timed by the
// BMC's own timestamp.
func (m *DCMIMeter) ReadPower(ctx context.Context) ([]power.Reading, error) {
	resp, err := m.conn.Do(ctx, GetPowerReadingRequest())
	if err != nil {
		return nil, fmt.Errorf("DCMI get power reading: %w", err)
	}
	r, err := DecodePowerReading(resp)
	if err != nil {
		return nil, fmt.Errorf("DCMI get power reading: %w", err)
	}
	return []power.Reading{{Zone: reading.ZonePlatform, Socket: -1, Watts: float64(r.Current), Time: bmcTime(r.Timestamp)}}, nil
}

// bmcTime drops timestamps a BMC clock never set can produce (1970):
// integrating over those would use a meaningless interval.
func bmcTime(t time.Time) time.Time {
	if t.Year() < 2000 {
		return time.Time{}
	}
	return t
}

// Close closes the connection if it is a Device.
func (m *DCMIMeter) Close() error {
	if c, ok := m.conn.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
