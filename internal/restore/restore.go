// Package restore keeps what restore_on_exit promises: the value each
// attribute of a disk had before the daemon first changed it, on disk
// before the change (an originals.File), and putting them back at stop.
package restore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/fileio"
	"github.com/iosched/iosched/internal/originals"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/tasks"
)

// Keeper remembers, per disk, the value each attribute had before the
// daemon first changed it, in StateDir/originals.json (an originals.File),
// so restore_on_exit can put them back even after a crash and restart. The
// file is written before the change it protects, and the generation it
// replaces is kept beside it (originals.json.prev). Disks are told apart by
// their diskseq (unique per disk since boot) and the file by the boot id:
// after a reboot every disk has its kernel defaults again, and the file
// means nothing. Each record also keeps the values the daemon wrote
// (Record.Left): a record whose disk shows other values since (an admin's,
// after a crash) is dropped, at start and at the restore, never replayed
// over them.
//
// A record that cannot be read is never written over: it is moved aside
// (originals.json.unreadable-TIME) and the previous generation read instead.
// The disks present then that neither covers are suspect: the values they
// show may be the policy's own, set by the daemon that wrote the lost
// record. Their first pass marks the attributes already at the policy's
// value unknown, which restore_on_exit reports instead of "restoring".
type Keeper struct {
	path, prev string
	fs         sysfs.FS
	bootID     string
	// frozen, when set, is why the file must not be written: it could
	// not be read, nor moved aside.
	frozen error

	mu      sync.Mutex
	cond    *sync.Cond
	disks   map[string]*originals.Record
	gen     uint64 // bumped by every change to disks
	saved   uint64 // the gen last written
	saving  bool
	suspect map[string]string // name: diskseq, until the disk's first pass
	nsus    atomic.Int32      // len(suspect), read without the lock
}

// Load reads the originals file in dir. It returns an error, with
// originals that remember nothing and never write, when the file cannot be
// read nor moved aside.
func Load(dir string, fs sysfs.FS, log *slog.Logger) (*Keeper, error) {
	path := filepath.Join(dir, "originals.json")
	o := &Keeper{path: path, prev: path + ".prev", fs: fs, bootID: originals.BootID(), disks: map[string]*originals.Record{}}
	o.cond = sync.NewCond(&o.mu)
	f, err := originals.Read(o.path)
	switch {
	case err == nil:
		o.adopt(f, log)
		return o, nil
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return o, nil // none yet (ENOTDIR: nor a directory to hold one)
	}
	aside, rerr := originals.MoveAside(o.path)
	if rerr != nil {
		o.frozen = fmt.Errorf("original values file %s is unreadable (%w) and could not be moved aside (%w)", o.path, err, rerr)
		return o, o.frozen
	}
	log.Error("original values file unreadable; moved aside", "file", o.path, "moved_to", aside, "error", err)
	if prev, perr := originals.Read(o.prev); perr == nil {
		o.adopt(prev, log)
		log.Warn("original values read from the previous generation", "file", o.prev, "disks", len(o.disks))
	}
	names, err := fs.Disks()
	if err != nil {
		log.Error("listing the disks to mark those without a record as suspect", "error", err)
	}
	o.suspect = map[string]string{}
	for _, n := range names {
		if o.disks[n] == nil {
			o.suspect[n] = fs.DiskSeq(n)
		}
	}
	o.nsus.Store(int32(len(o.suspect)))
	return o, nil
}

// adopt takes what f remembers of this boot's disks still present that
// still show what the daemon left: a disk set otherwise since (the daemon
// was killed, then an admin changed it) has the admin's values now, which
// are its originals for this daemon.
func (o *Keeper) adopt(f *originals.File, log *slog.Logger) {
	if f.BootID != o.bootID {
		return // another boot's disks
	}
	for name, do := range f.Disks {
		if o.fs.DiskSeq(name) != do.DiskSeq {
			continue
		}
		if err := do.CheckDisk(o.fs, name); err != nil {
			log.Warn("original values dropped: the disk was set otherwise since they were recorded; restore_on_exit will not undo that", "device", name, "error", err)
			continue
		}
		o.disks[name] = do
	}
}

// Remember records, for each change not yet remembered, the value dev shows
// before it (a setting a scheduler switch resets included: putting the
// scheduler back would give it the kernel's default, not what it was), and
// returns once they are on disk. Concurrent callers share one write (the
// file is rewritten whole, and 1000 disks appearing at once must not mean
// 1000 rewrites one after another).
func (o *Keeper) Remember(dev *sysfs.Device, changes []plan.Change) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	do := o.entry(dev.Name)
	if len(do.Left) != 1 {
		do.Left = []map[string]string{{}} // one state: the daemon's writes
	}
	for _, c := range changes {
		// A parameter of a scheduler the disk does not run yet has no
		// original: switching the scheduler back restores the old one's.
		if _, ok := do.Values[c.Attribute]; !ok && !slices.Contains(do.Unknown, c.Attribute) {
			if v, _ := dev.Value(sysfs.Attr(c.Attribute)); v != "" {
				do.Values[c.Attribute] = v
				o.gen++
			}
		}
		if do.Left[0][c.Attribute] != c.To {
			do.Left[0][c.Attribute] = c.To
			o.gen++
		}
	}
	return o.saveLocked()
}

// entry is the record of the disk now under name, a new one when it has
// none or the one it has is another disk's. Called with o.mu held.
func (o *Keeper) entry(name string) *originals.Record {
	do := o.disks[name]
	seq := ""
	if do == nil || do.DiskSeq != "" {
		seq = o.fs.DiskSeq(name)
	}
	if do == nil || do.DiskSeq != seq {
		do = &originals.Record{DiskSeq: seq, Values: map[string]string{}}
		o.disks[name] = do
		o.gen++
	}
	return do
}

// saveLocked returns once the file holds every change made so far, sharing
// one write among concurrent callers. Called with o.mu held.
func (o *Keeper) saveLocked() error {
	want := o.gen
	for o.saved < want {
		if o.saving {
			o.cond.Wait()
			continue
		}
		o.saving = true
		b, err := json.Marshal(originals.File{BootID: o.bootID, Disks: o.disks})
		gen, empty := o.gen, len(o.disks) == 0
		o.mu.Unlock()
		if err == nil {
			err = o.write(b, empty)
		}
		o.mu.Lock()
		o.saving = false
		if err == nil {
			o.saved = gen
		}
		o.cond.Broadcast()
		if err != nil {
			return err
		}
	}
	return nil
}

// Save writes the file once every change made so far is in it.
func (o *Keeper) Save() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.saveLocked()
}

// Forget drops a disk that went away: its successor under the same name
// starts with its own defaults.
func (o *Keeper) Forget(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.disks[name]; ok {
		delete(o.disks, name)
		o.gen++ // written with the next save
	}
}

// Restored forgets the values of a disk put back; the attributes whose
// value is unknown stay recorded, so the next daemon still reports them.
func (o *Keeper) Restored(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	do, ok := o.disks[name]
	switch {
	case !ok:
	case len(do.Unknown) > 0:
		do.Values, do.Left = map[string]string{}, nil
		o.gen++
	default:
		delete(o.disks, name)
		o.gen++
	}
}

// write replaces the file with b, keeping the generation it replaces, or
// removes both when nothing is remembered.
func (o *Keeper) write(b []byte, empty bool) error {
	if o.frozen != nil {
		return o.frozen
	}
	if empty {
		// Each removal on its own: a joined error would count as
		// missing when only one of the two files is.
		var errs []error
		for _, p := range []string{o.path, o.prev} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	if err := os.Remove(o.prev); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Link(o.path, o.prev); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("keeping the previous generation: %w", err)
	}
	return fileio.Write(o.path, b)
}

// Suspects reports whether some disks may still have unknown originals.
func (o *Keeper) Suspects() bool { return o != nil && o.nsus.Load() > 0 }

// MarkUnknown settles a suspect disk on its first pass: the attributes the
// policy sets that are already at its value (p changes nothing on them)
// have an unknown original. The record is saved at once.
func (o *Keeper) MarkUnknown(dev *sysfs.Device, ev policy.Evaluation, p plan.Plan, log *slog.Logger) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	seq, ok := o.suspect[dev.Name]
	if !ok {
		return nil
	}
	delete(o.suspect, dev.Name)
	o.nsus.Add(-1)
	if seq != o.fs.DiskSeq(dev.Name) {
		return nil // another disk now: its values are its own
	}
	moving := map[string]bool{}
	for _, c := range p.Changes {
		moving[c.Attribute] = true
	}
	for _, s := range p.Skipped {
		moving[s.Attribute] = true
	}
	var unknown []string
	for _, s := range ev.Settings {
		if !moving[s.Attribute] && !slices.Contains(unknown, s.Attribute) {
			unknown = append(unknown, s.Attribute)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	do := o.entry(dev.Name)
	for _, a := range unknown {
		if _, known := do.Values[a]; !known && !slices.Contains(do.Unknown, a) {
			do.Unknown = append(do.Unknown, a)
			o.gen++
		}
	}
	sort.Strings(do.Unknown)
	log.Warn("original values unknown: their record was unreadable and the disk already has the policy's values; restore_on_exit cannot put them back",
		"device", dev.Name, "attributes", strings.Join(do.Unknown, ","))
	return o.saveLocked()
}

// Unknown lists, by disk, the attributes whose original value is unknown.
func (o *Keeper) Unknown() map[string][]string {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var out map[string][]string
	for name, do := range o.disks {
		if len(do.Unknown) > 0 {
			if out == nil {
				out = map[string][]string{}
			}
			out[name] = slices.Clone(do.Unknown)
		}
	}
	return out
}

// UnknownDisks lists the disks with an unknown original value, sorted.
func (o *Keeper) UnknownDisks() []string {
	var names []string
	for name := range o.Unknown() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Plans are the changes that put every remembered value back, in write
// order. A disk that no longer shows what the daemon left is dropped (and
// logged): its values are someone else's now.
func (o *Keeper) Plans(log *slog.Logger) []plan.Plan {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []plan.Plan
	for name, do := range o.disks {
		if o.fs.DiskSeq(name) != do.DiskSeq {
			continue
		}
		if err := do.CheckDisk(o.fs, name); err != nil {
			log.Warn("not restored: the disk was set otherwise since the daemon wrote it; its original values are dropped", "device", name, "error", err)
			delete(o.disks, name)
			o.gen++ // written with the next save
			continue
		}
		p := plan.Plan{Name: name}
		for attr, v := range do.Values {
			p.Changes = append(p.Changes, plan.Change{Attribute: attr, To: v, Rule: "restore_on_exit"})
		}
		sysfs.SortByWriteOrder(p.Changes, func(c plan.Change) string { return c.Attribute })
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Grace is how long past the stop timeout the restore at stop waits for
// writes already in the kernel.
const Grace = time.Second

// Stop is what the restore at stop is given by the daemon.
type Stop struct {
	Writing   []string               // the disks whose pass is still writing
	ProbeRuns func(name string) bool // whether a probe of the daemon's runs on the disk
	Locks     *disklock.Locks
	Applier   apply.Applier
	Timeout   time.Duration // the daemon's StopTimeout
	InFlight  *tasks.Writes
	Log       *slog.Logger
}

// Restore puts back the original values of every disk but those in
// s.Writing (their pass is still running) and those a probe holds (the
// daemon's own, or a CLI probe's lock: it switches the scheduler, and two
// switches at once on one queue must never happen), then forgets those it
// restored. The others stay in the originals file for the next daemon to
// restore: so does a disk whose write has not returned within the stop timeout
// and Grace. A disk with unknown values counts as failed: what is
// known of it is put back, the rest cannot be. It returns how many failed.
func (o *Keeper) Restore(s Stop) (failed int) {
	writing := s.Writing
	plans := o.Plans(s.Log)
	unknown := o.Unknown()
	all := len(plans)
	releases := map[string]func(){} // the disks' locks, held until the writes are done
	defer func() {
		for _, release := range releases {
			release()
		}
	}()
	plans = slices.DeleteFunc(plans, func(p plan.Plan) bool {
		if slices.Contains(writing, p.Name) {
			s.Log.Warn("not restored: its pass is still writing; its original values stay remembered", "device", p.Name)
			return true
		}
		if s.ProbeRuns(p.Name) {
			s.Log.Warn("not restored: a probe holds it; its original values stay remembered", "device", p.Name)
			return true
		}
		release, err := s.Locks.LockToWrite(p.Name)
		switch {
		case disklock.IsBusy(err):
			s.Log.Warn("not restored: a probe holds it; its original values stay remembered", "device", p.Name)
			return true
		case err != nil:
			s.Log.Warn("not restored: its lock cannot be taken; its original values stay remembered", "device", p.Name, "error", err)
			return true
		}
		releases[p.Name] = release
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	// Writes not started when ctx ends fail at once; one already in the
	// kernel, on a queue frozen behind a disk that does not answer, returns
	// when the disk does, or never: it is waited for Grace more.
	each := s.Applier.Each(ctx, plans)
	waiting := make(map[string]bool, len(plans))
	for _, p := range plans {
		waiting[p.Name] = true
	}
	var results []apply.Result
	giveUp := time.After(s.Timeout + Grace)
collect:
	for len(waiting) > 0 {
		select {
		case r, ok := <-each:
			if !ok {
				break collect
			}
			results = append(results, r.Result)
			delete(waiting, r.Device)
		case <-giveUp:
			break collect
		}
	}
	restored := 0
	if len(waiting) > 0 {
		// No probe may switch a queue a write waits on: each such disk's
		// lock is let go when its write returns, not before.
		pending := map[string]func(){}
		for name := range waiting {
			release, returned := releases[name], s.InFlight.Add(name, "restore")
			pending[name] = func() { release(); returned() }
			delete(releases, name)
		}
		go func() {
			for r := range each {
				if release := pending[r.Device]; release != nil {
					release()
				}
			}
		}()
	}
	for _, name := range slices.Sorted(maps.Keys(waiting)) {
		s.Log.Error("not restored: its write has not returned (its queue is frozen behind I/O the disk does not answer); its original values stay remembered, and its lock held while the write waits",
			"device", name, "waited", s.Timeout+Grace)
		failed++
	}
	for _, r := range results {
		for _, o := range r.Outcomes {
			attrs := []any{"device", r.Device, "attribute", o.Attribute, "from", o.Before, "to", o.To}
			switch o.Status {
			case apply.Written:
				s.Log.Info("restored", attrs...)
			case apply.Mismatch:
				s.Log.Warn("restore: the kernel kept another value", append(attrs, "got", o.Got)...)
			case apply.Failed:
				s.Log.Error("restore failed", append(attrs, "error", o.Err)...)
			}
		}
		switch {
		case r.Failed():
			failed++
		case unknown[r.Device] != nil:
			o.Restored(r.Device)
			failed++
		default:
			o.Restored(r.Device)
			restored++
		}
	}
	for name, attrs := range unknown {
		if !slices.ContainsFunc(plans, func(p plan.Plan) bool { return p.Name == name }) && !slices.Contains(writing, name) && !(s.ProbeRuns(name) || s.Locks.Held(name)) {
			failed++ // no plan: nothing known to put back
		}
		s.Log.Error("not restored: the original values are unknown (their record was unreadable)", "device", name, "attributes", strings.Join(attrs, ","))
	}
	if err := o.Save(); err != nil {
		s.Log.Error("writing the original values file", "error", err)
	}
	s.Log.Info("original values restored", "disks", restored, "failed", failed, "skipped", all-len(plans))
	return failed
}
