package capmc

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Recorded capmc get_system_power replies (see the CAPMC API's
// get_system_power response schema).
const (
	okOutput = `{
"start_time":"2015-04-01 17:30:00",
"avg":5942,
"min":5748,
"max":6132,
"window_len":60,
"e":0,
"err_msg":""
}`
	errOutput = `{"e":22,"err_msg":"Invalid argument: window_len must be between 1 and 3600"}`
)

func TestParseSystemPower(t *testing.T) {
	p, err := ParseSystemPower([]byte(okOutput))
	if err != nil || p.Avg != 5942 || p.Min != 5748 || p.Max != 6132 || p.WindowLen != 60 {
		t.Fatalf("%+v, %v", p, err)
	}
	if _, err := ParseSystemPower([]byte(errOutput)); err == nil || !strings.Contains(err.Error(), "capmc error 22: Invalid argument") {
		t.Fatalf("error reply: %v", err)
	}
	for _, bad := range []string{"", "capmc: command not found", `{"avg":"5942","e":0}`, `{"e":0}`, `{"avg":1}`, `{"avg":-3,"e":0}`} {
		if _, err := ParseSystemPower([]byte(bad)); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestMeter(t *testing.T) {
	m := &Meter{path: "capmc", window: 60, run: func(_ context.Context, _ string, args ...string) ([]byte, error) {
		if strings.Join(args, " ") != "get_system_power -w 60" {
			return nil, errors.New("bad args " + strings.Join(args, " "))
		}
		return []byte(okOutput), nil
	}}
	r, err := m.ReadPower(context.Background())
	if err != nil || len(r) != 1 || r[0].Watts != 5942 || r[0].Zone != "platform" {
		t.Fatalf("%+v, %v", r, err)
	}
	if _, err := NewMeter("capmc", 0); err == nil {
		t.Fatal("window 0 accepted")
	}
}

func FuzzParseSystemPower(f *testing.F) {
	f.Add([]byte(okOutput))
	f.Add([]byte(errOutput))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := ParseSystemPower(b); err == nil && (p.Avg < 0 || p.E != 0) {
			t.Fatalf("accepted %+v", p)
		}
	})
}
