package ipmi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/power/powertest"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// scriptConn answers each DCMI request with the response the test set.
type scriptConn struct {
	resp []byte
	err  error
}

func (c *scriptConn) Do(context.Context, Request) ([]byte, error) { return c.resp, c.err }

// Property: a BMC answering DCMI with completion errors,
// inactive measurement, transport errors, 65535 W glitches and repeated
// samples never makes platform energy decrease, NaN/Inf or outrun the
// ceiling; the energy is the trapezoid integral over the good samples.
func TestDCMIProperty(t *testing.T) {
	for seed := uint64(0); seed < 5; seed++ {
		r := rand.New(rand.NewPCG(seed, 50))
		conn := &scriptConn{}
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		now := t0
		const ceiling = 3000.0
		c := power.NewManualCachedWith(NewDCMIMeter(conn), power.MeterOptions{Now: func() time.Time { return now },
			MaxWatts: power.MaxWatts{reading.ZonePlatform: ceiling}})
		s := powertest.Series{Ceiling: ceiling}
		var want, prevW float64
		var prevT time.Time
		glitches := 0
		for i := 0; i < 200; i++ {
			now = now.Add(time.Second)
			w := uint16(50 + r.IntN(900))
			pr := PowerReading{Current: w, Timestamp: now, Period: time.Second, Active: true}
			good := true
			conn.err = nil
			switch k := r.IntN(10); {
			case i == 0:
			case k == 0:
				pr.Current, good = 65535, false
				glitches++
			case k == 1:
				pr.Active, good = false, false
			case k == 2:
				conn.err, good = errors.New("ioctl: device busy"), false
			case k == 3 && !prevT.IsZero():
				pr.Timestamp, good = prevT, false // no new sample
			}
			conn.resp = EncodePowerReading(pr)
			if k := r.IntN(20); k == 0 && i > 0 && pr.Current != 65535 {
				conn.resp, good = []byte{0xC1}, false // invalid command
			}
			c.Poll(context.Background())
			if good {
				if !prevT.IsZero() {
					want += (prevW + float64(w)) / 2 * pr.Timestamp.Sub(prevT).Seconds()
				}
				prevW, prevT = float64(w), pr.Timestamp
			}
			if samples, err := c.Read(context.Background()); err == nil {
				s.Check(t, fmt.Sprintf("seed %d step %d", seed, i), samples[0].Joules, now)
			}
		}
		if math.Abs(s.Last()-want) > 1e-6*want {
			t.Fatalf("seed %d: %v J, want %v J", seed, s.Last(), want)
		}
		if h := c.SourceHealth(); h.Rejected["out_of_range"] != uint64(glitches) || h.Errors == 0 {
			t.Fatalf("seed %d: health %+v after %d glitches", seed, h, glitches)
		}
	}
}
