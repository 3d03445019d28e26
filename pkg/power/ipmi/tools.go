package ipmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Tool is a command-line IPMI client that can read DCMI power.
type Tool struct {
	Name  string   // executable name looked up on PATH
	Args  []string // arguments that print the power reading
	Parse func(stdout []byte) (PowerReading, error)
}

// Tools are the supported fallbacks, in order of preference: FreeIPMI
// prints the most complete and stable output.
var Tools = []Tool{
	{Name: "ipmi-dcmi", Args: []string{"--get-system-power-statistics"}, Parse: ParseFreeIPMI},
	{Name: "ipmitool", Args: []string{"dcmi", "power", "reading"}, Parse: ParseIPMITool},
	{Name: "ipmiutil", Args: []string{"dcmi", "power"}, Parse: ParseIPMIUtil},
}

// ToolMeter runs an IPMI tool each read: a power.PowerReader for zone
// platform, timed by the read (the tools print the BMC's timestamp in
// local, second-resolution formats that differ between versions).
type ToolMeter struct {
	tool Tool
	path string
	run  func(ctx context.Context, path string, args ...string) (stdout, stderr []byte, err error)
}

// NewToolMeter runs tool from path (its PATH lookup when empty).
func NewToolMeter(tool Tool, path string) (*ToolMeter, error) {
	if path == "" {
		p, err := exec.LookPath(tool.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tool.Name, err)
		}
		path = p
	}
	return &ToolMeter{tool: tool, path: path, run: runCommand}, nil
}

func runCommand(ctx context.Context, path string, args ...string) ([]byte, []byte, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

// Name implements power.PowerReader.
func (t *ToolMeter) Name() string { return "ipmi" }

// ReadPower implements power.PowerReader.
func (t *ToolMeter) ReadPower(ctx context.Context) ([]power.Reading, error) {
	stdout, stderr, runErr := t.run(ctx, t.path, t.tool.Args...)
	r, err := t.tool.Parse(append(stdout, stderr...))
	if err != nil {
		if runErr != nil {
			err = fmt.Errorf("%w (exit: %v)", err, runErr)
		}
		return nil, fmt.Errorf("%s %s: %w", t.tool.Name, strings.Join(t.tool.Args, " "), err)
	}
	return []power.Reading{{Zone: reading.ZonePlatform, Socket: -1, Watts: float64(r.Current)}}, nil
}

// fields splits "Key : value" lines (any spacing around the colon) into a
// map of trimmed keys to trimmed values.
func fields(out []byte) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		if _, dup := m[k]; !dup {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// watts parses "<n> Watts" (any case of the unit, as the tools differ).
func watts(key, v string) (uint16, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(v), " ")
	if !strings.EqualFold(strings.TrimSpace(unit), "watts") {
		return 0, fmt.Errorf("%s: %q is not \"<n> Watts\"", key, trunc(v))
	}
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%s: %q: %w", key, trunc(v), err)
	}
	return uint16(n), nil
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// errorLine returns the first line that looks like the tool's own error
// message, for errors when the reading is missing.
func errorLine(out []byte, markers ...string) string {
	for _, line := range strings.Split(string(out), "\n") {
		l := strings.TrimSpace(line)
		for _, mk := range markers {
			if strings.Contains(strings.ToLower(l), mk) {
				return l
			}
		}
	}
	for _, line := range strings.Split(string(out), "\n") {
		if l := strings.TrimSpace(line); l != "" {
			return trunc(l)
		}
	}
	return "no output"
}

// ErrNoReading means the tool printed no power reading.
var ErrNoReading = errors.New("no power reading in output")

// ParseFreeIPMI parses `ipmi-dcmi --get-system-power-statistics`:
//
//	Current Power                        : 226 Watts
//	Minimum Power over sampling duration : 0 watts
//	…
//	Statistics reporting time period     : 1000 milliseconds
//	Power Measurement                    : Active
//
// "Power Measurement : Not Available" is ErrInactive; errors come as
// "ipmi_cmd_dcmi_get_power_reading: <reason>" on stderr.
func ParseFreeIPMI(out []byte) (PowerReading, error) {
	f := fields(out)
	cur, ok := f["Current Power"]
	if !ok {
		return PowerReading{}, fmt.Errorf("%w: %s", ErrNoReading, errorLine(out, "ipmi_cmd", "ipmi_ctx", "error", "could not"))
	}
	var r PowerReading
	var err error
	if r.Current, err = watts("Current Power", cur); err != nil {
		return PowerReading{}, err
	}
	for key, dst := range map[string]*uint16{
		"Minimum Power over sampling duration": &r.Min,
		"Maximum Power over sampling duration": &r.Max,
		"Average Power over sampling duration": &r.Avg,
	} {
		if v, ok := f[key]; ok {
			if *dst, err = watts(key, v); err != nil {
				return PowerReading{}, err
			}
		}
	}
	switch state := f["Power Measurement"]; state {
	case "Active":
		r.Active = true
	case "Not Available":
		return r, ErrInactive
	default:
		return PowerReading{}, fmt.Errorf("power measurement state: unexpected %q", trunc(state))
	}
	return r, nil
}

// ParseIPMITool parses `ipmitool dcmi power reading`:
//
//	Instantaneous power reading:                   332 Watts
//	…
//	Power reading state is:                   activated
//
// "deactivated" is ErrInactive. A BMC error is printed as
// "DCMI request failed because: Invalid command (c1)", and ipmitool still
// exits 0 on some versions, so the message, not the exit status, decides.
func ParseIPMITool(out []byte) (PowerReading, error) {
	f := fields(out)
	if v, ok := f["DCMI request failed because"]; ok {
		return PowerReading{}, fmt.Errorf("BMC: %s", trunc(v))
	}
	cur, ok := f["Instantaneous power reading"]
	if !ok {
		return PowerReading{}, fmt.Errorf("%w: %s", ErrNoReading, errorLine(out, "unable", "error", "could not", "not"))
	}
	var r PowerReading
	var err error
	if r.Current, err = watts("Instantaneous power reading", cur); err != nil {
		return PowerReading{}, err
	}
	for key, dst := range map[string]*uint16{
		"Minimum during sampling period":           &r.Min,
		"Maximum during sampling period":           &r.Max,
		"Average power reading over sample period": &r.Avg,
	} {
		if v, ok := f[key]; ok {
			if *dst, err = watts(key, v); err != nil {
				return PowerReading{}, err
			}
		}
	}
	switch state := f["Power reading state is"]; state {
	case "activated":
		r.Active = true
	case "deactivated":
		return r, ErrInactive
	default:
		return PowerReading{}, fmt.Errorf("power reading state: unexpected %q", trunc(state))
	}
	return r, nil
}

// ParseIPMIUtil parses `ipmiutil dcmi power`:
//
//	Current Power:                   49 Watts
//	…
//	Power reading state is:          active
//	ipmiutil dcmi, completed successfully
//
// "not active" is ErrInactive; a failure ends with "ipmiutil dcmi, <reason>".
func ParseIPMIUtil(out []byte) (PowerReading, error) {
	f := fields(out)
	cur, ok := f["Current Power"]
	if !ok {
		for _, line := range strings.Split(string(out), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ipmiutil dcmi, "); ok && rest != "completed successfully" {
				return PowerReading{}, fmt.Errorf("%w: %s", ErrNoReading, trunc(rest))
			}
		}
		return PowerReading{}, fmt.Errorf("%w: %s", ErrNoReading, errorLine(out, "error", "not support", "cannot"))
	}
	var r PowerReading
	var err error
	if r.Current, err = watts("Current Power", cur); err != nil {
		return PowerReading{}, err
	}
	for key, dst := range map[string]*uint16{
		"Min Power over sample duration": &r.Min,
		"Max Power over sample duration": &r.Max,
		"Avg Power over sample duration": &r.Avg,
	} {
		if v, ok := f[key]; ok {
			if *dst, err = watts(key, v); err != nil {
				return PowerReading{}, err
			}
		}
	}
	switch state := f["Power reading state is"]; state {
	case "active":
		r.Active = true
	case "not active":
		return r, ErrInactive
	default:
		return PowerReading{}, fmt.Errorf("power reading state: unexpected %q", trunc(state))
	}
	return r, nil
}
