package hostshare

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
)

// The share over a stream (vsock, for hosts that cannot share a
// directory with their guests): the host writes one frame on each
// connection and closes it; the guest sends nothing. Which domain's share
// a connection gets is decided by the host from the connection alone (the
// peer's context id, or the per-domain Unix socket it arrived on), never
// from anything the guest says.
//
// A frame is the magic "WTS1", the body's length (4 bytes, big endian, at
// most MaxFrame) and the body: a JSON object holding the metadata file's
// content as it is ("meta") and each zone file's content ("counters":
// zone name to the counter's unsigned decimal microjoules, as the files
// hold them), so the guest validates a frame exactly as it validates the
// files (ParseMeta, ParseCounter).

// FrameMagic starts every frame; the digit is the framing's version.
const FrameMagic = "WTS1"

// MaxFrame bounds a frame's body: a share holds a few zones, so anything
// bigger is not one, and a guest never reads more.
const MaxFrame = 64 << 10

// maxFrameZones bounds the counters of one frame (zone names are short,
// and a host has a handful).
const maxFrameZones = 64

// ErrFrame marks a malformed frame: the bytes arrived, and they are not a
// share.
var ErrFrame = errors.New("malformed share frame")

type frameBody struct {
	Meta     json.RawMessage   `json:"meta"`
	Counters map[string]string `json:"counters"`
}

// EncodeFrame is the frame of a share: its metadata and each zone's
// counter in joules, as Write puts them in the files.
func EncodeFrame(m *Meta, joules map[string]float64) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("share frame: %w", err)
	}
	meta, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("share frame: %w", err)
	}
	body := frameBody{Meta: meta, Counters: make(map[string]string, len(m.Zones))}
	for _, z := range m.Zones {
		body.Counters[z.Name] = string(FormatCounter(joules[z.Name]))
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("share frame: %w", err)
	}
	if len(b) > MaxFrame {
		return nil, fmt.Errorf("share frame: %d bytes, more than %d", len(b), MaxFrame)
	}
	out := make([]byte, 0, 8+len(b))
	out = append(out, FrameMagic...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(b)))
	return append(out, b...), nil
}

// Frame is a decoded frame: the metadata file's content, and each zone
// file's content by zone name. Nothing in it is validated beyond the
// framing: the reader parses Meta with ParseMeta and each counter with
// ParseCounter, as it does the files.
type Frame struct {
	Meta     []byte
	Counters map[string][]byte
}

// DecodeFrame reads one frame from r, which must end after it (the host
// closes the connection). Errors wrapping ErrFrame are a malformed frame;
// others are the connection's.
func DecodeFrame(r io.Reader) (*Frame, error) {
	var head [8]byte
	if n, err := io.ReadFull(r, head[:]); err != nil {
		if n > 0 || !errors.Is(err, io.EOF) {
			return nil, frameErr("header: %v", err)
		}
		return nil, fmt.Errorf("share frame: connection closed before a frame (the host has no share for this guest yet): %w", err)
	}
	if string(head[:4]) != FrameMagic {
		return nil, frameErr("magic %q, want %q", head[:4], FrameMagic)
	}
	n := binary.BigEndian.Uint32(head[4:])
	if n == 0 || n > MaxFrame {
		return nil, frameErr("body of %d bytes, want 1 to %d", n, MaxFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, frameErr("body: %v", err)
	}
	// One frame per connection: anything after it is not a share.
	var extra [1]byte
	if k, err := r.Read(extra[:]); k > 0 {
		return nil, frameErr("bytes after the frame")
	} else if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("share frame: after the frame: %w", err)
	}
	return ParseFrameBody(body)
}

// ParseFrameBody parses a frame's body (the JSON after the header).
func ParseFrameBody(body []byte) (*Frame, error) {
	var b frameBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return nil, frameErr("body: %v", err)
	}
	if dec.More() {
		return nil, frameErr("body: data after the JSON object")
	}
	if len(b.Meta) == 0 || string(b.Meta) == "null" {
		return nil, frameErr("no meta")
	}
	if len(b.Counters) == 0 || len(b.Counters) > maxFrameZones {
		return nil, frameErr("%d counters, want 1 to %d", len(b.Counters), maxFrameZones)
	}
	f := &Frame{Meta: b.Meta, Counters: make(map[string][]byte, len(b.Counters))}
	for _, z := range slices.Sorted(maps.Keys(b.Counters)) {
		if !zoneName.MatchString(z) {
			return nil, frameErr("invalid zone name %q", z)
		}
		f.Counters[z] = []byte(b.Counters[z])
	}
	return f, nil
}

func frameErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrFrame, fmt.Sprintf(format, a...))
}
