package looptest

import (
	"math"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/observe"
)

// TestIntegrationSlowDepth: on a slow loop device, the reads a Reader
// keeps in flight are the disk's requests in flight (its stat file), and
// the disk does about one read per perRead whatever the depth.
func TestIntegrationSlowDepth(t *testing.T) {
	Require(t)
	const perRead = time.Millisecond
	l := AddSlow(t, 7191, 64<<20, perRead)
	for _, depth := range []int{1, 32} {
		r := StartReader(t, l.Name, depth, 4096)
		d, err := observe.Open(observe.StatPath("/sys", l.Name))
		if err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 10*time.Second, "reads in flight", func() bool {
			s, err := d.Read()
			return err == nil && s.InFlight >= uint64(depth) && r.Reads() > 0
		})
		a, err := d.Read()
		if err != nil {
			t.Fatal(err)
		}
		before := r.Reads()
		time.Sleep(time.Second) // the interval measured
		after := r.Reads()
		b, err := d.Read()
		if err != nil {
			t.Fatal(err)
		}
		r.Stop(t)
		d.Close()
		p, err := observe.Between(a, b)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("depth %d: %.0f IOPS, busy %.2f, %.2f in flight, %.2f while busy, %.0f µs a read", depth, p.IOPS(), p.Busy, p.QueueDepth, p.BusyDepth, p.LatencyUs)
		if math.Abs(p.BusyDepth-float64(depth)) > 0.15*float64(depth)+0.2 {
			t.Errorf("depth %d: the disk saw %.2f in flight while busy", depth, p.BusyDepth)
		}
		driven := float64(after-before) / p.Elapsed.Seconds()
		if math.Abs(p.IOPS()-driven) > 0.15*driven {
			t.Errorf("depth %d: stat shows %.0f IOPS, the reader did %.0f", depth, p.IOPS(), driven)
		}
		if max := float64(time.Second / perRead); p.IOPS() > max || p.IOPS() < max/4 {
			t.Errorf("depth %d: %.0f IOPS, want at most %.0f and near it", depth, p.IOPS(), max)
		}
	}
}
