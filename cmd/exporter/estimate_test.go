package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/pkg/power/curves"
)

func runEstimateArgs(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runEstimate(context.Background(), args, stdio{out: &out, err: &errb})
	return out.String(), errb.String(), code
}

// The printed figures are the model's, and anchor on numbers worked out
// by hand from the cited tables.
func TestEstimateCommandNumbers(t *testing.T) {
	out, errs, code := runEstimateArgs(t, "--cpu", "AMD EPYC 7B13 64-Core Processor", "--sockets", "1", "--threads", "16", "--load", "100")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	// A VM of 16 vCPUs on EPYC 3rd Gen at full load: 16 × CCF's 1.96 W.
	if !strings.Contains(out, fmt.Sprintf("%-9s %7.1f W", "vm:", 31.4)) || !strings.Contains(out, "EPYC 3rd Gen") {
		t.Errorf("vm line: want 16 x 1.96 = 31.4 W for EPYC 3rd Gen:\n%s", out)
	}
	m, err := curves.Default()
	if err != nil {
		t.Fatal(err)
	}
	node := curves.Node{CPU: "AMD EPYC 7B13 64-Core Processor", Sockets: 1, Threads: 16}
	server, err := m.Server(node)
	if err != nil {
		t.Fatal(err)
	}
	e := server.Points[10]
	if want := fmt.Sprintf("%-9s %7.1f W  band %7.1f .. %7.1f W", "server:", e.Watts, e.Lower, e.Upper); !strings.Contains(out, want) {
		t.Errorf("want %q in:\n%s", want, out)
	}
	if !(e.Lower < e.Watts && e.Watts < e.Upper) || e.Watts < 50 || e.Watts > 1000 {
		t.Errorf("server estimate %+v: not a 16-thread server's power with a band around it", e)
	}

	// Two Xeon Platinum 8180 (205 W TDP each in the fitted table) at full
	// load: Teads' 1.02 × 410 W = 418.2 W of packages, below the server.
	out, _, code = runEstimateArgs(t, "--cpu=Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz", "--sockets=2", "--threads=112", "--memory-gib=192", "--load=100%")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%-9s %7.1f W", "package:", 418.2)) || !strings.Contains(out, `"xeon platinum 8180" (microarchitecture: Skylake; model tier: cpu)`) {
		t.Errorf("8180 at 100%%: exit %d\n%s", code, out)
	}
	// Interpolation: 25% is halfway between the curve's 20% and 30%.
	out, _, _ = runEstimateArgs(t, "--cpu=Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz", "--sockets=2", "--threads=112", "--memory-gib=192", "--load=25")
	s, err := m.Server(curves.Node{CPU: "Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz", Sockets: 2, Threads: 112, MemoryGiB: 192})
	if err != nil {
		t.Fatal(err)
	}
	mid := (s.Points[2].Watts + s.Points[3].Watts) / 2
	if want := fmt.Sprintf("%-9s %7.1f W", "server:", mid); !strings.Contains(out, want) || math.Abs(s.At(0.25).Watts-mid) > 1e-9 {
		t.Errorf("25%%: want %q in\n%s", want, out)
	}
}

// An unknown CPU is not an error: the output says what the model fell
// back to.
func TestEstimateCommandUnknownCPU(t *testing.T) {
	out, errs, code := runEstimateArgs(t, "--cpu", "Frobnicator 9000", "--sockets", "1", "--threads", "8", "--load", "50")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{
		`fallback: CPU "frobnicator 9000" not recognised: generic curve from threads, sockets and memory`,
		"fallback: memory unknown: ",
		"fallback: TDP unknown: ",
		`fallback: no per-vCPU figures for "frobnicator 9000": CCF's average 0.74-3.50 W per vCPU`,
		"model tier: generic",
		// 8 vCPUs on CCF's average along the median shape at 50%:
		// 8 × (0.74 + 2.76 × s) with s the shape's 50% point.
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	m, _ := curves.Default()
	sh := m.Fit().Shape
	s50 := (sh[5] - sh[0]) / (sh[10] - sh[0])
	if want := fmt.Sprintf("%-9s %7.1f W", "vm:", 8*(0.74+(3.5-0.74)*s50)); !strings.Contains(out, want) {
		t.Errorf("want %q in:\n%s", want, out)
	}
}

func TestEstimateCommandBadInput(t *testing.T) {
	base := []string{"--cpu", "Intel Xeon Gold 6248", "--sockets", "2", "--threads", "80", "--load", "50"}
	with := func(kv ...string) []string {
		out := append([]string(nil), base...)
		for i := 0; i < len(kv); i += 2 {
			for j := 0; j < len(out); j += 2 {
				if out[j] == kv[i] {
					out[j+1] = kv[i+1]
				}
			}
		}
		return out
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{with("--load", "150"), `--load "150": want a percentage from 0 to 100`},
		{with("--load", "-1"), `--load "-1": want a percentage`},
		{with("--load", "NaN"), `--load "NaN": want a percentage`},
		{with("--load", "half"), `--load "half": want a percentage`},
		{with("--sockets", "0"), "sockets 0: want 1..64"},
		{with("--sockets", "1000"), "sockets 1000: want 1..64"},
		{with("--threads", "0"), "threads 0: want 1..65536"},
		{with("--threads", "1"), "threads 1 fewer than sockets 2"},
		{with("--threads", "ten"), `invalid argument "ten" for "--threads`},
		{with("--cpu", " "), "--cpu is empty"},
		{append(with(), "--memory-gib", "-4"), "memory -4 GiB"},
		{append(with(), "--memory-gib", "NaN"), "memory NaN GiB"},
		{append(with(), "--memory-gib", "1e300"), "memory 1e+300 GiB"},
		{[]string{"--cpu", "x", "--threads", "8", "--load", "5"}, "--sockets is required"},
		{[]string{"--cpu", "x", "--sockets", "1", "--threads", "8"}, "--load is required"},
		{append(with(), "extra"), `unexpected argument "extra"`},
	} {
		out, errs, code := runEstimateArgs(t, tc.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}
}
