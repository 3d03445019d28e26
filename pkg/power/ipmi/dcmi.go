// Package ipmi reads a node's power from its BMC with the DCMI Get Power
// Reading command, through the kernel's OpenIPMI device (/dev/ipmi0) or,
// as fallbacks, the FreeIPMI, ipmitool and ipmiutil command-line tools.
package ipmi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// DCMI constants (DCMI 1.5 §6.6.1 Get Power Reading).
const (
	NetFnDCMI          = 0x2C // Group Extension request; responses are 0x2D
	CmdGetPowerReading = 0x02
	GroupExtDCMI       = 0xDC
	modeSystemPower    = 0x01 // "System Power Statistics"

	// stateActive is bit 6 of the power reading state: a power
	// measurement is present and active.
	stateActive = 0x40

	powerReadingLen = 19 // completion code + 18 data bytes
)

// Request is one IPMI request to the BMC.
type Request struct {
	NetFn byte
	Cmd   byte
	Data  []byte
}

// GetPowerReadingRequest is DCMI Get Power Reading in mode 1 (system power
// statistics): group extension, mode, two reserved bytes.
func GetPowerReadingRequest() Request {
	return Request{NetFn: NetFnDCMI, Cmd: CmdGetPowerReading, Data: []byte{GroupExtDCMI, modeSystemPower, 0x00, 0x00}}
}

// PowerReading is a decoded DCMI Get Power Reading response. The BMC
// computes Min/Max/Avg over Period; Current is its latest sample.
type PowerReading struct {
	Current, Min, Max, Avg uint16 // watts
	Timestamp              time.Time
	Period                 time.Duration
	Active                 bool // power measurement active (state bit 6)
}

// ErrInactive means the BMC answered but says it has no active power
// measurement: the reading fields are meaningless (often all zero).
var ErrInactive = errors.New("power measurement inactive (DCMI power reading state bit 6 clear): the BMC has no power sensor, or it is switched off")

// CompletionError is a non-zero IPMI completion code.
type CompletionError struct{ Code byte }

func (e *CompletionError) Error() string {
	return fmt.Sprintf("completion code 0x%02X (%s)", e.Code, completionText(e.Code))
}

// Unsupported reports whether the code says the BMC does not implement
// the command (no DCMI power reading): retrying is pointless.
func (e *CompletionError) Unsupported() bool {
	return e.Code == 0xC1 || e.Code == 0xD5 || e.Code == 0xCC
}

func completionText(c byte) string {
	switch c {
	case 0xC0:
		return "node busy"
	case 0xC1:
		return "invalid command"
	case 0xC3:
		return "timeout while processing command"
	case 0xC7:
		return "request data length invalid"
	case 0xCC:
		return "invalid data field in request"
	case 0xD4:
		return "insufficient privilege level"
	case 0xD5:
		return "command not supported in present state"
	case 0xD6:
		return "command sub-function disabled or unavailable"
	case 0xFF:
		return "unspecified error"
	}
	return "unknown"
}

// DecodePowerReading decodes a Get Power Reading response body: the
// completion code, group extension 0xDC, current/min/max/avg watts
// (little-endian uint16), timestamp and period in ms (little-endian
// uint32), and the state byte. An inactive measurement decodes with
// Active false and ErrInactive.
func DecodePowerReading(b []byte) (PowerReading, error) {
	if len(b) == 0 {
		return PowerReading{}, errors.New("empty response")
	}
	if b[0] != 0 {
		return PowerReading{}, &CompletionError{Code: b[0]}
	}
	if len(b) < powerReadingLen {
		return PowerReading{}, fmt.Errorf("response %d bytes, want %d", len(b), powerReadingLen)
	}
	if b[1] != GroupExtDCMI {
		return PowerReading{}, fmt.Errorf("group extension 0x%02X, want 0x%02X", b[1], GroupExtDCMI)
	}
	le := binary.LittleEndian
	r := PowerReading{
		Current:   le.Uint16(b[2:]),
		Min:       le.Uint16(b[4:]),
		Max:       le.Uint16(b[6:]),
		Avg:       le.Uint16(b[8:]),
		Timestamp: time.Unix(int64(le.Uint32(b[10:])), 0).UTC(),
		Period:    time.Duration(le.Uint32(b[14:])) * time.Millisecond,
		Active:    b[18]&stateActive != 0,
	}
	if !r.Active {
		return r, ErrInactive
	}
	return r, nil
}

// EncodePowerReading is the inverse of DecodePowerReading, for tests and
// fake BMCs.
func EncodePowerReading(r PowerReading) []byte {
	b := make([]byte, powerReadingLen)
	b[1] = GroupExtDCMI
	le := binary.LittleEndian
	le.PutUint16(b[2:], r.Current)
	le.PutUint16(b[4:], r.Min)
	le.PutUint16(b[6:], r.Max)
	le.PutUint16(b[8:], r.Avg)
	le.PutUint32(b[10:], uint32(r.Timestamp.Unix()))
	le.PutUint32(b[14:], uint32(r.Period/time.Millisecond))
	if r.Active {
		b[18] = stateActive
	}
	return b
}
