package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/iosched/iosched/apply"
	"github.com/iosched/iosched/plan"
	"github.com/iosched/iosched/sysfs"
)

// originals remembers, per disk, the value each attribute had before the
// daemon first changed it, in StateDir/originals.json, so restore_on_exit
// can put them back even after a crash and restart. The file is written
// before the change it protects. Disks are told apart by their diskseq
// (unique per disk since boot) and the file by the boot id: after a reboot
// every disk has its kernel defaults again, and the file means nothing.
type originals struct {
	path   string
	fs     sysfs.FS
	bootID string

	mu     sync.Mutex
	cond   *sync.Cond
	disks  map[string]*diskOriginals
	gen    uint64 // bumped by every change to disks
	saved  uint64 // the gen last written
	saving bool
}

type diskOriginals struct {
	DiskSeq string            `json:"diskseq,omitempty"`
	Values  map[string]string `json:"values"`
}

type originalsFile struct {
	BootID string                    `json:"boot_id"`
	Disks  map[string]*diskOriginals `json:"disks"`
}

// loadOriginals reads the originals file in dir. It returns an error when
// the file is there but cannot be read, and then originals that remember
// nothing.
func loadOriginals(dir string, fs sysfs.FS, log *slog.Logger) (*originals, error) {
	o := &originals{path: filepath.Join(dir, "originals.json"), fs: fs, bootID: bootID(), disks: map[string]*diskOriginals{}}
	o.cond = sync.NewCond(&o.mu)
	b, err := os.ReadFile(o.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return o, nil
	case err != nil:
		return o, fmt.Errorf("original values: %w", err)
	}
	var f originalsFile
	if err := json.Unmarshal(b, &f); err != nil {
		log.Warn("original values file unreadable; starting afresh", "file", o.path, "error", err)
		return o, nil
	}
	if f.BootID != o.bootID {
		return o, nil // another boot's disks
	}
	for name, do := range f.Disks {
		if do != nil && do.Values != nil && sysfs.ValidateName(name) == nil && fs.DiskSeq(name) == do.DiskSeq {
			o.disks[name] = do
		}
	}
	return o, nil
}

// remember records, for each change not yet remembered, the value dev shows
// before it (a setting a scheduler switch resets included: putting the
// scheduler back would give it the kernel's default, not what it was), and
// returns once they are on disk. Concurrent callers share one write (the
// file is rewritten whole, and 1000 disks appearing at once must not mean
// 1000 rewrites one after another).
func (o *originals) remember(dev *sysfs.Device, changes []plan.Change) error {
	name := dev.Name
	o.mu.Lock()
	defer o.mu.Unlock()
	do := o.disks[name]
	seq := ""
	if do == nil || do.DiskSeq != "" {
		seq = o.fs.DiskSeq(name)
	}
	if do == nil || do.DiskSeq != seq {
		do = &diskOriginals{DiskSeq: seq, Values: map[string]string{}}
		o.disks[name] = do
		o.gen++
	}
	for _, c := range changes {
		// A parameter of a scheduler the disk does not run yet has no
		// original: switching the scheduler back restores the old one's.
		if _, ok := do.Values[c.Attribute]; !ok {
			if v := current(dev, c.Attribute); v != "" {
				do.Values[c.Attribute] = v
				o.gen++
			}
		}
	}
	want := o.gen
	for o.saved < want {
		if o.saving {
			o.cond.Wait()
			continue
		}
		o.saving = true
		b, err := o.encode()
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

// forget drops a disk that went away: its successor under the same name
// starts with its own defaults.
func (o *originals) forget(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.disks[name]; ok {
		delete(o.disks, name)
		o.gen++ // written with the next remember or restore
	}
}

func (o *originals) encode() ([]byte, error) {
	return json.Marshal(originalsFile{BootID: o.bootID, Disks: o.disks})
}

// write replaces the file with b, or removes it when nothing is remembered.
func (o *originals) write(b []byte, empty bool) error {
	if empty {
		if err := os.Remove(o.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return writeAtomic(o.path, b)
}

// plans are the changes that put every remembered value back, in write order.
func (o *originals) plans() []plan.Device {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []plan.Device
	for name, do := range o.disks {
		if o.fs.DiskSeq(name) != do.DiskSeq {
			continue
		}
		p := plan.Device{Name: name}
		for attr, v := range do.Values {
			p.Changes = append(p.Changes, plan.Change{Attribute: attr, To: v, Rule: "restore_on_exit"})
		}
		sysfs.SortByWriteOrder(p.Changes, func(c plan.Change) string { return c.Attribute })
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// restore puts back the original values of every disk but those in
// writing (their pass is still running), then forgets those it restored.
// The others stay in the originals file for the next daemon to restore.
func (d *Daemon) restore(writing []string) {
	plans := d.orig.plans()
	all := len(plans)
	plans = slices.DeleteFunc(plans, func(p plan.Device) bool {
		if slices.Contains(writing, p.Name) {
			d.log.Warn("not restored: its pass is still writing; its original values stay remembered", "device", p.Name)
			return true
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StopTimeout)
	defer cancel()
	results := d.applier.All(ctx, plans)
	restored := 0
	for _, r := range results {
		for _, o := range r.Outcomes {
			attrs := []any{"device", r.Device, "attribute", o.Attribute, "from", o.Before, "to", o.To}
			switch o.Status {
			case apply.Written:
				d.log.Info("restored", attrs...)
			case apply.Mismatch:
				d.log.Warn("restore: the kernel kept another value", append(attrs, "got", o.Got)...)
			case apply.Failed:
				d.log.Error("restore failed", append(attrs, "error", o.Err)...)
			}
		}
		if !r.Failed() {
			d.orig.forget(r.Device)
			restored++
		}
	}
	d.orig.mu.Lock()
	b, err := d.orig.encode()
	if err == nil {
		err = d.orig.write(b, len(d.orig.disks) == 0)
	}
	d.orig.mu.Unlock()
	if err != nil {
		d.log.Error("writing the original values file", "error", err)
	}
	d.log.Info("original values restored", "disks", restored, "failed", len(results)-restored, "still_writing", all-len(plans))
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
