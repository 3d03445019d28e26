package cgroupstats

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/pkg/reading"
)

func TestParseUint(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "42": 42, "18446744073709551615": 18446744073709551615} {
		if got, ok := parseUint([]byte(in)); !ok || got != want {
			t.Errorf("parseUint(%q) = %d, %v, want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "-1", "+1", "1.5", " 1", "18446744073709551616", "99999999999999999999"} {
		if got, ok := parseUint([]byte(in)); ok {
			t.Errorf("parseUint(%q) = %d, want failure", in, got)
		}
	}
}

func TestParseLimits(t *testing.T) {
	for in, want := range map[string]uint64{
		"9223372036854771712\n": reading.Unlimited, // 4 KiB pages
		"9223372036854710272\n": reading.Unlimited, // 64 KiB pages
		"9223372036854775807\n": reading.Unlimited, // before 3.19
		"8589934592\n":          8589934592,
	} {
		if got, err := parseV1Limit([]byte(in)); err != nil || got != want {
			t.Errorf("parseV1Limit(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]uint64{"max\n": reading.Unlimited, "4096\n": 4096} {
		if got, err := parseV2Max([]byte(in)); err != nil || got != want {
			t.Errorf("parseV2Max(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
}

func TestParseKV(t *testing.T) {
	keys := []string{"user_usec", "system_usec", "absent"}
	vals := make([]uint64, 3)
	// Unknown keys are skipped even when their value is not a number.
	found, err := parseKV([]byte("usage_usec 7\nuser_usec 5\nweird x y\n\nsystem_usec 6\nuser_usec 9"), keys, vals)
	if err != nil || found != 0b011 || !reflect.DeepEqual(vals, []uint64{9, 6, 0}) {
		t.Errorf("parseKV = %b %v %v, want 011 [9 6 0] nil", found, vals, err)
	}
	_, err = parseKV([]byte("user_usec 5\nsystem_usec 6 7\n"), keys, vals)
	if err == nil || err.Error() != `line 2 "system_usec 6 7": invalid number` {
		t.Errorf("trailing field: err = %v", err)
	}
}

func TestParseBlkio(t *testing.T) {
	var io []reading.DeviceIO
	if err := parseBlkio([]byte("8:0 Read 10\n8:0 Write 20\n8:0 Total 30\n8:16 Discard 4\nTotal 34\n"), false, &io); err != nil {
		t.Fatal(err)
	}
	if err := parseBlkio([]byte("8:16 Read 1\n8:0 Write 2\n8:0 Frobnicate 3\nTotal 3\n"), true, &io); err != nil {
		t.Fatal(err)
	}
	want := []reading.DeviceIO{
		{Major: 8, Minor: 0, ReadBytes: 10, WriteBytes: 20, WriteOps: 2},
		{Major: 8, Minor: 16, DiscardBytes: 4, ReadOps: 1},
	}
	if !reflect.DeepEqual(io, want) {
		t.Errorf("got  %+v\nwant %+v", io, want)
	}
	for in, want := range map[string]string{
		"8:0 Read x\n":           `line 1 "8:0 Read x": invalid number`,
		"8:0 Read\n":             `line 1 "8:0 Read": invalid number`,
		"8 Read 1\n":             `line 1 "8 Read 1": invalid device number, want major:minor`,
		"8:0 Read 1 2\n":         `line 1 "8:0 Read 1 2": invalid number`,
		"4294967296:0 R 1":       `line 1 "4294967296:0 R 1": invalid device number, want major:minor`,
		"8:0 Read 1\nRead 8:0 1": `line 2 "Read 8:0 1": invalid device number, want major:minor`,
	} {
		var io []reading.DeviceIO
		if err := parseBlkio([]byte(in), false, &io); err == nil || err.Error() != want {
			t.Errorf("parseBlkio(%q) err = %v, want %s", in, err, want)
		}
	}
}

func TestParseIOStat(t *testing.T) {
	var io []reading.DeviceIO
	in := "259:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=5 dios=6 cost.vrate=135.25 bogus\n8:0 rbytes=7\n"
	if err := parseIOStat([]byte(in), &io); err != nil {
		t.Fatal(err)
	}
	sortIO(io)
	want := []reading.DeviceIO{
		{Major: 8, Minor: 0, ReadBytes: 7},
		{Major: 259, Minor: 0, ReadBytes: 1, WriteBytes: 2, ReadOps: 3, WriteOps: 4, DiscardBytes: 5, DiscardOps: 6},
	}
	if !reflect.DeepEqual(io, want) {
		t.Errorf("got  %+v\nwant %+v", io, want)
	}
	if err := parseIOStat([]byte("8:0 rbytes=1 wios=\n"), &io); err == nil || !strings.Contains(err.Error(), `line 1 "8:0 rbytes=1 wios=": invalid number`) {
		t.Errorf("empty value: err = %v", err)
	}
}

func TestParsePressure(t *testing.T) {
	some, full, hasFull, err := parsePressure([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=678\n"))
	if err != nil || some != 12345 || full != 678 || !hasFull {
		t.Errorf("got %d %d %v %v, want 12345 678 true nil", some, full, hasFull, err)
	}
	some, _, hasFull, err = parsePressure([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"))
	if err != nil || some != 5 || hasFull {
		t.Errorf("no full line: got %d %v %v", some, hasFull, err)
	}
	for in, want := range map[string]string{
		"":                           `no "some" line`,
		"full total=1\n":             `no "some" line`,
		"some avg10=1.00\n":          `line 1 "some avg10=1.00": no total= field`,
		"some total=1\nfull total=x": `line 2 "full total=x": invalid number`,
	} {
		if _, _, _, err := parsePressure([]byte(in)); err == nil || err.Error() != want {
			t.Errorf("parsePressure(%q) err = %v, want %s", in, err, want)
		}
	}
	if _, _, _, err := parsePressure(nil); !errors.Is(err, errNoSome) {
		t.Errorf("empty: err = %v, want errNoSome", err)
	}
}

func TestCountLinesAndDevName(t *testing.T) {
	if n := countLines([]byte("1\n2\n\n3")); n != 3 {
		t.Errorf("countLines = %d, want 3", n)
	}
	if n, ok := parseDevName([]byte("MAJOR=8\nMINOR=0\nDEVNAME=sda\n")); !ok || string(n) != "sda" {
		t.Errorf("parseDevName = %q %v", n, ok)
	}
	if _, ok := parseDevName([]byte("MAJOR=8\nDEVNAME=\n")); ok {
		t.Error("empty DEVNAME accepted")
	}
}
