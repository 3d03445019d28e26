package measure

import (
	"context"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// fakeMeter names the sources of a golden report: rapl measures, the
// estimator models.
type fakeMeter struct{}

func (fakeMeter) Name() string                                         { return "rapl+estimator" }
func (fakeMeter) Estimated() bool                                      { return false }
func (fakeMeter) Read(_ context.Context) ([]reading.ZoneSample, error) { return nil, nil }

func (fakeMeter) Meters() []power.Meter {
	return []power.Meter{named{"rapl", false}, named{"estimator", true}}
}

type named struct {
	name      string
	estimated bool
}

func (n named) Name() string                                       { return n.name }
func (n named) Estimated() bool                                    { return n.estimated }
func (named) Read(_ context.Context) ([]reading.ZoneSample, error) { return nil, nil }

var _ power.Meter = fakeMeter{}

// rawRun is a run's readings: wall seconds, the command's and the node's
// CPU seconds, and each zone's energy ("source/zone-socket" → J).
func rawRun(wall, cmd, node float64, zones map[string]float64) raw {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := raw{cmdNs: cmd * 1e9, nodeNs: node * 1e9}
	r.start.at, r.end.at = t0, t0.Add(time.Duration(wall*float64(time.Second)))
	for k, j := range zones {
		src, z, _ := strings.Cut(k, "/")
		name, sock := z, -1
		if n, s, ok := strings.Cut(z, "-"); ok {
			name, sock = n, int(s[0]-'0')
		}
		r.start.zones = append(r.start.zones, reading.ZoneSample{Zone: name, Socket: sock, Joules: 1000, Source: src})
		r.end.zones = append(r.end.zones, reading.ZoneSample{Zone: name, Socket: sock, Joules: 1000 + j, Source: src})
	}
	return r
}
