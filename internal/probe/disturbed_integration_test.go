package probe

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/probe/probeopt"
)

// TestIntegrationForcedProbeMarkedDisturbed: with Force, a disk another
// process is reading is probed, but the result is remembered marked as
// disturbed, and a lookup (the daemon's, a probe without --fresh) does not
// reuse it. (Before, a result measured under others' load was remembered
// and reused as any other.)
func TestIntegrationForcedProbeMarkedDisturbed(t *testing.T) {
	looptest.Require(t)
	live := liveFS(t)
	l := looptest.Add(t, 7343)
	l.Bind(t, 64<<20)
	startFrom(t, live, l.Name)

	// Another reader of the disk, for the length of the probe.
	fd, err := unix.Open("/dev/"+l.Name, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for off := int64(0); ; off = (off + 4096) % (64 << 20) {
			select {
			case <-stop:
				return
			default:
			}
			unix.Pread(fd, buf, off)
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	state := t.TempDir()
	runner := &Runner{FS: live, StateDir: state, Locks: testLocks(t), Store: OpenStore(state, nil), Progress: func(s string) { t.Log(s) }}
	o := Options{Options: probeopt.Options{Duration: 60 * time.Millisecond, Rounds: 1, Depth: 8, Engine: EngineIOUring}, Force: true}
	rep, err := runner.Probe(context.Background(), diskName(t, l.Name), o, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Disturbed, "busy") {
		t.Fatalf("a forced probe of a disk being read: Disturbed = %q, want the busy check's finding", rep.Disturbed)
	}
	recs, err := runner.Store.Records()
	if err != nil || len(recs) != 1 || recs[0].Disturbed != rep.Disturbed {
		t.Fatalf("remembered: %+v, %v; want one record marked disturbed", recs, err)
	}
	dev, err := live.Device(l.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := runner.Lookup(dev, o, 0); got != nil || err != nil {
		t.Errorf("the disturbed result was looked up for reuse: %+v, %v", got, err)
	}
}
