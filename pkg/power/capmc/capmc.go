// Package capmc reads power from Cray's capmc command-line client of the
// Cray Advanced Platform Monitoring and Control service.
package capmc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// SystemPower is `capmc get_system_power` output: the average, minimum and
// maximum power over the last WindowLen seconds.
type SystemPower struct {
	StartTime string  `json:"start_time"`
	Avg       float64 `json:"avg"`
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
	WindowLen int     `json:"window_len"`
	E         int     `json:"e"`
	ErrMsg    string  `json:"err_msg"`
}

// ParseSystemPower parses the JSON capmc prints. capmc reports failures
// in-band as a non-zero "e" with "err_msg"; those become errors.
func ParseSystemPower(out []byte) (SystemPower, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(out), &raw); err != nil {
		return SystemPower{}, fmt.Errorf("capmc output is not JSON: %w", err)
	}
	var p SystemPower
	if err := json.Unmarshal(bytes.TrimSpace(out), &p); err != nil {
		return SystemPower{}, fmt.Errorf("capmc output: %w", err)
	}
	if _, ok := raw["e"]; !ok {
		return SystemPower{}, fmt.Errorf("capmc output has no status field \"e\"")
	}
	if p.E != 0 {
		return SystemPower{}, fmt.Errorf("capmc error %d: %s", p.E, p.ErrMsg)
	}
	if _, ok := raw["avg"]; !ok {
		return SystemPower{}, fmt.Errorf("capmc output has no \"avg\"")
	}
	if p.Avg < 0 || p.WindowLen < 0 {
		return SystemPower{}, fmt.Errorf("capmc output: negative avg %v or window_len %d", p.Avg, p.WindowLen)
	}
	return p, nil
}

// Meter runs `capmc get_system_power -w <window>` each read. It is a
// power.PowerReader reporting zone platform with the window's average
// power. Note what it measures: capmc's system power is the power of the
// whole system the service manages (for a single-node partition, that
// node), so use it only where that is the node's own draw.
type Meter struct {
	path   string
	window int
	run    func(ctx context.Context, path string, args ...string) ([]byte, error)
}

// NewMeter runs capmc from path (PATH lookup when empty) with a window in
// seconds (at least 1).
func NewMeter(path string, window int) (*Meter, error) {
	if window < 1 {
		return nil, fmt.Errorf("capmc window: %d seconds, want >= 1", window)
	}
	if path == "" {
		p, err := exec.LookPath("capmc")
		if err != nil {
			return nil, fmt.Errorf("capmc: %w", err)
		}
		path = p
	}
	return &Meter{path: path, window: window, run: func(ctx context.Context, path string, args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, path, args...).Output()
	}}, nil
}

// Name implements power.PowerReader.
func (m *Meter) Name() string { return "capmc" }

// ReadPower implements power.PowerReader.
func (m *Meter) ReadPower(ctx context.Context) ([]power.Reading, error) {
	out, runErr := m.run(ctx, m.path, "get_system_power", "-w", strconv.Itoa(m.window))
	p, err := ParseSystemPower(out)
	if err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("capmc get_system_power: %w (exit: %v)", err, runErr)
		}
		return nil, fmt.Errorf("capmc get_system_power: %w", err)
	}
	return []power.Reading{{Zone: reading.ZonePlatform, Socket: -1, Watts: p.Avg}}, nil
}
