package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/fileio"
	"github.com/iosched/iosched/internal/originals"
	"github.com/iosched/iosched/internal/sysfs"
)

// This file keeps the adaptive disks' switch histories (adapt.History) in
// the state directory, so that max_switches_per_day, min_interval and the
// guard rail's pin hold over any 24 hours: across restarts, crashes, and
// reloads that give a disk a new controller.
//
// Times are wall-clock (CLOCK_REALTIME) times, so that "24 hours" spans a
// reboot. A clock set back keeps a record longer than 24 hours (the
// switches look recent), one set forward releases it early; the first is
// the safe side.

// adaptHistoryName is the histories' file in the state directory.
const adaptHistoryName = "adapt.json"

// Bounds on the file: the disks it keeps a record of (only those with a
// switch or a pin in the last 24 hours are kept at all; past the bound the
// records least recently switched go first), and the size read back.
const (
	maxAdaptRecords   = 4096
	maxAdaptFileBytes = 16 << 20
)

// adaptHistoryFile is adapt.json.
type adaptHistoryFile struct {
	Saved time.Time `json:"saved"`
	// LostAt is when an unreadable file was found in its place: until 24
	// hours after it, a disk without a record of its own is taken to
	// have used its whole day's budget then, since what it did is
	// unknown.
	LostAt *time.Time             `json:"lost_at,omitempty"`
	Disks  map[string]*adaptEntry `json:"disks"`
}

// adaptEntry is one disk's history, by name, with what tells the disk
// from another that later takes the name.
type adaptEntry struct {
	BootID  string `json:"boot_id,omitempty"`
	DiskSeq string `json:"diskseq,omitempty"`
	Serial  string `json:"serial,omitempty"`
	WWID    string `json:"wwid,omitempty"`

	Switches    []time.Time `json:"switches,omitempty"`
	LastSwitch  time.Time   `json:"last_switch,omitzero"`
	LastFrom    string      `json:"last_from,omitempty"`
	LastTo      string      `json:"last_to,omitempty"`
	LastReason  string      `json:"last_reason,omitempty"`
	PinnedUntil time.Time   `json:"pinned_until,omitzero"`
	// GuardCleared is when the guard rail's review lifted the pin of its
	// switch back, GuardClearedReason why.
	GuardCleared       time.Time `json:"guard_cleared,omitzero"`
	GuardClearedReason string    `json:"guard_cleared_reason,omitempty"`
}

func (e *adaptEntry) history() adapt.History {
	return adapt.History{Switches: e.Switches, LastSwitch: e.LastSwitch, LastFrom: e.LastFrom, LastTo: e.LastTo,
		LastReason: e.LastReason, PinnedUntil: e.PinnedUntil, GuardCleared: e.GuardCleared, GuardClearedReason: e.GuardClearedReason}
}

// diskID is what identifies a disk beyond its name.
type diskID struct{ bootID, diskSeq, serial, wwid string }

func idOfDevice(dev *sysfs.Device, bootID string) diskID {
	return diskID{bootID: bootID, diskSeq: dev.DiskSeq, serial: dev.Serial, wwid: dev.WWID}
}

// sameDisk says whether e was recorded of the disk id: a world-wide name
// or serial number both sides know decides; else, in the same boot, the
// kernel's disk sequence number; else (another boot, a disk that names no
// identity) the name alone, which keeps the history: the safe side.
func (e *adaptEntry) sameDisk(id diskID) bool {
	switch {
	case e.WWID != "" && id.wwid != "":
		return e.WWID == id.wwid
	case e.Serial != "" && id.serial != "":
		return e.Serial == id.serial
	case e.BootID != "" && e.BootID == id.bootID && e.DiskSeq != "" && id.diskSeq != "":
		return e.DiskSeq == id.diskSeq
	}
	return true
}

// adaptHistories is the daemon's copy of adapt.json, written through on
// every switch.
type adaptHistories struct {
	mu     sync.Mutex
	path   string // "" until loaded
	bootID string
	file   adaptHistoryFile
	now    func() time.Time
}

// load reads the file in dir. A missing file is an empty history; one
// that cannot be read or decoded is logged, moved aside (to
// adapt.json.unreadable) and replaced by one that marks the loss (LostAt).
func (h *adaptHistories) load(dir string, log *slog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.now == nil {
		h.now = time.Now
	}
	h.path = filepath.Join(dir, adaptHistoryName)
	h.bootID = originals.BootID()
	h.file = adaptHistoryFile{Disks: map[string]*adaptEntry{}}
	b, err := fileio.Read(h.path, maxAdaptFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err == nil {
		var f adaptHistoryFile
		if err = json.Unmarshal(b, &f); err == nil {
			if f.Disks == nil {
				f.Disks = map[string]*adaptEntry{}
			}
			h.file = f
			return
		}
	}
	now := h.now()
	h.file.LostAt = &now
	aside := h.path + ".unreadable"
	if rerr := os.Rename(h.path, aside); rerr != nil {
		aside = ""
	}
	log.Warn("adaptive: the switch history is unreadable: every adaptive disk is taken to have used its max_switches_per_day now, and waits 24 hours to switch",
		"file", h.path, "moved_to", aside, "error", err)
	if werr := h.saveLocked(); werr != nil {
		log.Warn("adaptive: cannot save the switch history", "file", h.path, "error", werr)
	}
}

// lookup returns the history recorded of the disk named name, or the
// conservative one a lost file leaves; false when there is none.
func (h *adaptHistories) lookup(name string, dev *sysfs.Device) (adapt.History, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.path == "" {
		return adapt.History{}, false
	}
	now := h.now()
	if e := h.file.Disks[name]; e != nil && e.sameDisk(idOfDevice(dev, h.bootID)) {
		if hist := e.history(); !hist.Empty(now) {
			return hist, true
		}
	}
	if lost := h.file.LostAt; lost != nil && now.Sub(*lost) < 24*time.Hour {
		sw := make([]time.Time, adapt.MaxHistory)
		for i := range sw {
			sw[i] = *lost
		}
		return adapt.History{Switches: sw}, true
	}
	return adapt.History{}, false
}

// record saves the disk's history after a switch or a lifted pin.
func (h *adaptHistories) record(name string, id diskID, hist adapt.History) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.path == "" {
		return nil
	}
	h.file.Disks[name] = &adaptEntry{
		BootID: id.bootID, DiskSeq: id.diskSeq, Serial: id.serial, WWID: id.wwid,
		Switches: hist.Switches, LastSwitch: hist.LastSwitch, LastFrom: hist.LastFrom, LastTo: hist.LastTo,
		LastReason: hist.LastReason, PinnedUntil: hist.PinnedUntil,
		GuardCleared: hist.GuardCleared, GuardClearedReason: hist.GuardClearedReason,
	}
	return h.saveLocked()
}

// saveLocked prunes what no limit needs any more and writes the file
// whole (atomically, and synced: it must outlive a crash of the machine).
func (h *adaptHistories) saveLocked() error {
	now := h.now()
	for name, e := range h.file.Disks {
		if e.history().Empty(now) {
			delete(h.file.Disks, name)
		}
	}
	if lost := h.file.LostAt; lost != nil && now.Sub(*lost) >= 24*time.Hour {
		h.file.LostAt = nil
	}
	if n := len(h.file.Disks) - maxAdaptRecords; n > 0 {
		names := make([]string, 0, len(h.file.Disks))
		for name := range h.file.Disks {
			names = append(names, name)
		}
		slices.SortFunc(names, func(a, b string) int {
			return h.file.Disks[a].LastSwitch.Compare(h.file.Disks[b].LastSwitch)
		})
		for _, name := range names[:n] {
			delete(h.file.Disks, name)
		}
	}
	h.file.Saved = now
	b, err := json.Marshal(&h.file)
	if err != nil {
		return err
	}
	if err := fileio.WriteWith(h.path, b, fileio.Options{Sync: true}); err != nil {
		return fmt.Errorf("saving the adaptive switch history: %w", err)
	}
	return nil
}
