package daemon

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/ueventtest"
)

// histories loads the switch histories of dir at the time *now.
func histories(t *testing.T, dir string, now *time.Time) (*adaptHistories, *ueventtest.LogBuffer) {
	t.Helper()
	log := &ueventtest.LogBuffer{}
	h := &adaptHistories{now: func() time.Time { return *now }}
	h.load(dir, slog.New(slog.NewTextHandler(log, nil)))
	return h, log
}

// A history recorded is found again by a daemon started later on the same
// state directory, for the same disk only, and only while a limit needs
// it: 24 hours after its last switch (and past its pin) it is gone from
// the file too.
func TestAdaptHistoryKeptAcrossLoads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	h, _ := histories(t, dir, &now)
	dev := &sysfs.Device{Name: "vdb", DiskSeq: "7", Serial: "S1"}
	hist := adapt.History{Switches: []time.Time{now.Add(-time.Hour), now}, LastSwitch: now, LastFrom: "none", LastTo: "mq-deadline", LastReason: "adapt: x"}
	if err := h.record("vdb", idOfDevice(dev, h.bootID), hist); err != nil {
		t.Fatal(err)
	}

	now = now.Add(23 * time.Hour)
	h2, _ := histories(t, dir, &now)
	got, ok := h2.lookup("vdb", dev)
	if !ok || len(got.Switches) != 2 || got.LastTo != "mq-deadline" || !got.LastSwitch.Equal(hist.LastSwitch) {
		t.Errorf("read back: %+v, %v; want %+v", got, ok, hist)
	}
	if _, ok := h2.lookup("vdb", &sysfs.Device{Name: "vdb", DiskSeq: "7", Serial: "S2"}); ok {
		t.Error("another disk (another serial) under the same name got the history")
	}
	if _, ok := h2.lookup("vdc", dev); ok {
		t.Error("another name got the history")
	}
	// Another boot (the disk sequence numbers start again): a disk with
	// no serial keeps its name's history, the safe side.
	noSerial := &sysfs.Device{Name: "vdd", DiskSeq: "3"}
	if err := h2.record("vdd", diskID{bootID: "another boot", diskSeq: "9"}, hist); err != nil {
		t.Fatal(err)
	}
	if _, ok := h2.lookup("vdd", noSerial); !ok {
		t.Error("a disk without a serial lost its history to a reboot")
	}

	now = now.Add(2 * time.Hour) // 25 h after the last switch
	if _, ok := h2.lookup("vdb", dev); ok {
		t.Error("a history 25 hours old still counts")
	}
	if err := h2.record("vde", diskID{}, adapt.History{Switches: []time.Time{now}, LastSwitch: now, LastTo: "none"}); err != nil {
		t.Fatal(err)
	}
	var f adaptHistoryFile
	b, err := os.ReadFile(filepath.Join(dir, adaptHistoryName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Disks) != 1 || f.Disks["vde"] == nil {
		t.Errorf("the file keeps %d records, want only vde's: %s", len(f.Disks), b)
	}
}

// The file is bounded: past maxAdaptRecords disks, the records switched
// least recently go.
func TestAdaptHistoryBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	h, _ := histories(t, dir, &now)
	for i := range maxAdaptRecords + 10 {
		at := now.Add(time.Duration(i) * time.Second)
		h.file.Disks[fmt.Sprint("d", i)] = &adaptEntry{Switches: []time.Time{at}, LastSwitch: at, LastTo: "none"}
	}
	h.mu.Lock()
	err := h.saveLocked()
	h.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(h.file.Disks); n != maxAdaptRecords {
		t.Errorf("%d records kept, want %d", n, maxAdaptRecords)
	}
	if h.file.Disks["d0"] != nil || h.file.Disks[fmt.Sprint("d", maxAdaptRecords+9)] == nil {
		t.Error("the oldest records should go first")
	}
}

// An unreadable history is a warning, never a crash, and the safe side:
// every disk is taken to have used its day's budget when it was found,
// also by the daemons after (the file is replaced by one that says so),
// until 24 hours later.
func TestAdaptHistoryUnreadable(t *testing.T) {
	t.Parallel()
	for _, garbage := range []string{"{not json", `{"disks": {"vdb": {"switches": "soon"}}}`} {
		dir := t.TempDir()
		path := filepath.Join(dir, adaptHistoryName)
		if err := os.WriteFile(path, []byte(garbage), 0o644); err != nil {
			t.Fatal(err)
		}
		now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
		h, log := histories(t, dir, &now)
		// A WARN an admin must see: every disk's switch budget is taken
		// as spent for a day, which nothing else explains.
		if lines := log.Lines("level=WARN", "switch history is unreadable"); len(lines) != 1 {
			t.Errorf("%q: warnings %q", garbage, log.String())
		}
		if b, err := os.ReadFile(path + ".unreadable"); err != nil || string(b) != garbage {
			t.Errorf("%q: the unreadable file moved aside: %q, %v", garbage, b, err)
		}
		dev := &sysfs.Device{Name: "vdb"}
		got, ok := h.lookup("vdb", dev)
		if !ok || len(got.Switches) != adapt.MaxHistory || !got.Switches[0].Equal(now) {
			t.Errorf("%q: history of a disk after the loss: %+v, %v; want the whole budget used now", garbage, got, ok)
		}

		now = now.Add(time.Hour)
		h2, log2 := histories(t, dir, &now)
		if got, ok := h2.lookup("vdb", dev); !ok || !got.Switches[0].Equal(now.Add(-time.Hour)) {
			t.Errorf("%q: the next daemon: %+v, %v; want the loss an hour ago", garbage, got, ok)
		}
		if strings.Contains(log2.String(), "WARN") {
			t.Errorf("%q: the file written after the loss is unreadable: %s", garbage, log2.String())
		}
		now = now.Add(24 * time.Hour)
		if _, ok := h2.lookup("vdb", dev); ok {
			t.Errorf("%q: the loss still counts 25 hours later", garbage)
		}
	}
}

// A pin the guard rail's review lifted is saved as lifted, with when and
// why: a restart must not pin the disk again, and the record lasts a day.
func TestAdaptHistoryKeepsALiftedPin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	h, _ := histories(t, dir, &now)
	dev := &sysfs.Device{Name: "vdb", Serial: "S1"}
	pinned := adapt.History{Switches: []time.Time{now.Add(-time.Minute), now}, LastSwitch: now, LastFrom: "none", LastTo: "mq-deadline",
		LastReason: "adapt: guard: x", PinnedUntil: now.Add(24 * time.Hour)}
	if err := h.record("vdb", idOfDevice(dev, h.bootID), pinned); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	lifted := pinned
	lifted.PinnedUntil, lifted.GuardCleared, lifted.GuardClearedReason = time.Time{}, now, "adapt: guard: review: y"
	if err := h.record("vdb", idOfDevice(dev, h.bootID), lifted); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, adaptHistoryName))
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); strings.Contains(s, "pinned_until") || !strings.Contains(s, `"guard_cleared":"2026-12-03T12:01:00Z","guard_cleared_reason":"adapt: guard: review: y"`) {
		t.Errorf("adapt.json: %s", s)
	}
	now = now.Add(23 * time.Hour)
	h2, _ := histories(t, dir, &now)
	got, ok := h2.lookup("vdb", dev)
	if !ok || !got.PinnedUntil.IsZero() || !got.GuardCleared.Equal(lifted.GuardCleared) || got.GuardClearedReason != lifted.GuardClearedReason {
		t.Errorf("read back %+v, %v", got, ok)
	}
}
