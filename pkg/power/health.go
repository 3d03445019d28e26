package power

import (
	"github.com/wattrace/wattrace/pkg/reading"
)

// healthOf is a meter's health however it reports it: HealthReporter or a
// Cached's SourceHealth. Every meter of this package has one of them; a
// foreign meter without either is read synchronously by the stats loop,
// which sees its failures, and is reported as up here.
func healthOf(m Meter) []reading.SourceHealth {
	switch h := m.(type) {
	case HealthReporter:
		return h.Health()
	case interface{ SourceHealth() reading.SourceHealth }:
		return []reading.SourceHealth{h.SourceHealth()}
	}
	return []reading.SourceHealth{{Source: m.Name(), Up: true, Rejected: map[string]uint64{}}}
}

// Health implements HealthReporter: the health of every member, in
// precedence order.
func (c *Combined) Health() []reading.SourceHealth {
	var out []reading.SourceHealth
	for _, m := range c.meters {
		out = append(out, healthOf(m)...)
	}
	return out
}
