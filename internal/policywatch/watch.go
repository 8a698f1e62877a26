package policywatch

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/iosched/iosched/internal/policy"
)

// DefaultDebounce is how long the files must be quiet before a reload is
// signalled: an editor's save or kubelet's update is a handful of events
// within a few milliseconds, and one reload after them is what is wanted.
const DefaultDebounce = 250 * time.Millisecond

// maxHashed bounds how much of a policy file is read to tell whether it
// changed; a larger file counts as changed whenever its size, time or
// inode does (the policy loader refuses it anyway).
const maxHashed = 4 << 20

// Options say what to follow.
type Options struct {
	// Path is the policy as the daemon loads it (policy.Load): a file, a
	// directory of *.toml files, or "" for paths.Default.PolicyFile and
	// paths.Default.PolicyDir.
	Path string
	// Debounce is the quiet time before a signal; DefaultDebounce if 0.
	Debounce time.Duration
	// Log gets a line for each signal and each inotify problem; nil logs
	// nothing.
	Log *slog.Logger
}

// Watcher follows the policy's files. Make it with New, run it with Run,
// and take the signals from Changed.
type Watcher struct {
	opts    Options
	locs    policy.Locations // the default locations, when Path is ""
	ino     *fsnotify.Watcher
	changed chan struct{}
	// watched are the directories watched, by path, with the directory
	// each path led to when its watch was added: inotify watches an
	// inode, not a path, and drops the watch with the directory, so a
	// path that now leads elsewhere (the directory removed and made
	// again, replaced by a link, its link swapped) is watched anew.
	watched map[string]dirID
	last    string // the fingerprint when last signalled (or at start)
	// policyPaths are the paths whose events may change the policy, as
	// of the last sync (policyPaths).
	policyPaths map[string]bool
	// policyDirs are the directories whose policy files (by name) are
	// the policy's, as of the last sync.
	policyDirs map[string]bool
	// checked, when set (by tests, before Run), is called after each
	// check of the files with the names of the events that led to it, so
	// a test knows when the watcher has looked at what it did.
	checked func(events []string)
	// alsoFollow, when set (by tests, before Run), names events followed
	// besides the policy's, so a test can wake the watcher with a file
	// of its own.
	alsoFollow func(name string) bool
}

// New opens the inotify instance and takes the files' fingerprint as they
// are now: only a change from this state is signalled.
func New(opts Options) (*Watcher, error) {
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return newWatcher(opts, policy.DefaultLocations)
}

func newWatcher(opts Options, locs policy.Locations) (*Watcher, error) {
	ino, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("following the policy: %w", err)
	}
	w := &Watcher{opts: opts, locs: locs, ino: ino, changed: make(chan struct{}, 1), watched: map[string]dirID{}}
	w.sync()
	w.last = w.fingerprint()
	return w, nil
}

// Changed delivers a value when the policy's files changed and have been
// quiet for the debounce time. Signals not yet taken are coalesced into
// one: a reload reads the files as they are then.
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

// Run follows the files until ctx is done, then closes the inotify
// instance. It returns nil then, or the error that stopped it.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.ino.Close()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	// Events that never stop (a busy directory stood in for a missing
	// one) must not postpone the check for ever: it is made at the latest
	// ten debounce times after the first event.
	var first time.Time
	var seen []string // the events' names since the last check, for checked
	wait := func() {
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		debounce.Reset(min(w.opts.Debounce, first.Add(10*w.opts.Debounce).Sub(now)))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ino.Events:
			if !ok {
				return fmt.Errorf("following the policy: the inotify instance closed")
			}
			if !w.follows(ev.Name) {
				// Not the policy's: another file in a watched
				// directory (the daemon's own log among them, whose
				// every line is an event here, so nothing is
				// logged about it).
				continue
			}
			w.opts.Log.Debug("policy file event", "event", ev.String())
			if w.checked != nil {
				seen = append(seen, ev.Name)
			}
			if _, ok := w.watched[ev.Name]; ok && ev.Op.Has(fsnotify.Remove|fsnotify.Rename) {
				// A watched directory went (its watch with it, or
				// fsnotify's for a move): a directory made in its place
				// must be watched even if it got the old inode number.
				delete(w.watched, ev.Name)
			}
			wait()
		case err, ok := <-w.ino.Errors:
			if !ok {
				return fmt.Errorf("following the policy: the inotify instance closed")
			}
			// An overflow lost events: what changed is unknown, so the
			// fingerprint decides, as after any event.
			w.opts.Log.Warn("following the policy", "error", err)
			wait()
		case <-debounce.C:
			first = time.Time{}
			// Directories that appeared (policy.d created, kubelet's new
			// timestamped directory) are watched from now on.
			w.sync()
			if fp := w.fingerprint(); fp != w.last {
				w.last = fp
				w.opts.Log.Info("the policy's files changed: reloading")
				select {
				case w.changed <- struct{}{}:
				default: // one is pending already
				}
			}
			if w.checked != nil {
				w.checked(seen)
				seen = nil
			}
		}
	}
}

// files are the policy files as the loader would read them now, in order
// (policy.Locations.Files); none when the loader could not list them (the
// fingerprint records the error then).
func (w *Watcher) files() ([]string, error) {
	return w.locs.Files(w.opts.Path)
}

// locations are where the policy is read from: the path given, or the
// default file and directory.
func (w *Watcher) locations() []string {
	if w.opts.Path == "" {
		return []string{w.locs.File, w.locs.Dir}
	}
	return []string{w.opts.Path}
}

// dirs are the directories whose events may change the policy: each
// location's parent (a file replaced by rename, a directory created, the
// ..data link swapped are events there), each directory location, and the
// directory each file resolves into (an edit through a link). A directory
// that does not exist yet is stood in for by its nearest existing
// ancestor, so its creation is seen.
func (w *Watcher) dirs() []string {
	var out []string
	for _, l := range w.locations() {
		out = append(out, existingAncestor(filepath.Dir(l)))
		if isDir(l) {
			out = append(out, l)
		}
	}
	files, _ := w.files()
	for _, f := range files {
		if target, err := filepath.EvalSymlinks(f); err == nil {
			out = append(out, filepath.Dir(target))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// dirID is a directory's identity: its device and inode numbers.
type dirID struct{ dev, ino uint64 }

func idOf(dir string) (dirID, bool) {
	st, err := os.Stat(dir)
	if err != nil {
		return dirID{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return dirID{}, false
	}
	return dirID{dev: sys.Dev, ino: sys.Ino}, true
}

// sync watches the directories dirs names now and stops watching the
// others (inotify drops a removed directory's watch by itself). A path
// that leads to another directory than when it was watched is watched
// again: its old watch went with the old directory, or is on a directory
// no longer the policy's.
func (w *Watcher) sync() {
	want := map[string]bool{}
	for _, d := range w.dirs() {
		want[d] = true
		id, ok := idOf(d)
		if old, watched := w.watched[d]; watched && ok && old == id {
			continue
		}
		if err := w.ino.Add(d); err != nil {
			w.opts.Log.Warn("following the policy: cannot watch a directory; its changes will not reload the policy", "dir", d, "error", err)
			delete(w.watched, d)
			continue
		}
		w.watched[d] = id
	}
	for d := range w.watched {
		if !want[d] {
			_ = w.ino.Remove(d) // fails when inotify dropped it already
			delete(w.watched, d)
		}
	}
	w.syncFollowed()
}

// syncFollowed works out which events may change the policy as the
// files are now: an event on a location or on a directory above one (it
// was made, removed, replaced), on a policy file or any link on the way
// to one or to a location (an edit, an editor's rename, kubelet's swap of
// a ConfigMap's ..data link), on a file named as a policy file in a
// policy directory (one added), or on a watched directory itself. Events
// on anything else in the watched directories (a log file, an editor's
// swap file) are not followed.
func (w *Watcher) syncFollowed() {
	paths, dirs := map[string]bool{}, map[string]bool{}
	for _, l := range w.locations() {
		l = absolute(l)
		for p := l; ; p = filepath.Dir(p) {
			paths[p] = true
			if p == filepath.Dir(p) {
				break
			}
		}
		linksOnTheWay(l, paths)
		if isDir(l) {
			dirs[l] = true
			if target, err := filepath.EvalSymlinks(l); err == nil {
				dirs[absolute(target)] = true
			}
		}
	}
	files, _ := w.files()
	for _, f := range files {
		f = absolute(f)
		paths[f] = true
		linksOnTheWay(f, paths)
		if target, err := filepath.EvalSymlinks(f); err == nil {
			paths[absolute(target)] = true
		}
	}
	for d := range w.watched {
		paths[absolute(d)] = true
	}
	w.policyPaths, w.policyDirs = paths, dirs
}

// follows says whether an event on name may change the policy
// (syncFollowed).
func (w *Watcher) follows(name string) bool {
	if w.alsoFollow != nil && w.alsoFollow(name) {
		return true
	}
	name = absolute(name)
	if w.policyPaths[name] {
		return true
	}
	return w.policyDirs[filepath.Dir(name)] && policy.IsPolicyFile(filepath.Base(name))
}

// maxLinks bounds the links followed resolving one path, as the kernel's
// own limit on a lookup (MAXSYMLINKS, include/linux/namei.h) does.
const maxLinks = 40

// linksOnTheWay adds to links every symbolic link met resolving path:
// replacing any of them changes what the path leads to.
func linksOnTheWay(path string, links map[string]bool) {
	followed := 0
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/")
	cur := "/"
	for len(parts) > 0 {
		next := filepath.Join(cur, parts[0])
		parts = parts[1:]
		st, err := os.Lstat(next)
		if err != nil {
			return
		}
		if st.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		links[next] = true
		if followed++; followed > maxLinks {
			return
		}
		target, err := os.Readlink(next)
		if err != nil {
			return
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(cur, target)
		}
		target = filepath.Clean(target)
		parts = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), parts...)
		cur = "/"
	}
}

// absolute is path made absolute and clean, as events and locations are
// compared; the daemon does not change its working directory.
func absolute(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return filepath.Clean(path)
}

// fingerprint sums up what the loader would read: which files, and what
// each holds. Only regular files are
// opened (a FIFO in a policy's place must not block the watcher), with
// O_NONBLOCK in case one is put there between the stat and the open.
func (w *Watcher) fingerprint() string {
	var b strings.Builder
	files, err := w.files()
	if err != nil {
		fmt.Fprintf(&b, "error %v\x00", err)
	}
	for _, f := range files {
		fmt.Fprintf(&b, "%s\x00", f)
		st, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(&b, "error %v\x00", err)
			continue
		}
		fmt.Fprintf(&b, "%v %d\x00", st.Mode(), st.Size())
		if st.Mode().IsRegular() && st.Size() <= maxHashed {
			// The text decides: the same policy in a new file (kubelet
			// resyncing, a save with no change) is no change.
			fmt.Fprintf(&b, "%x\x00", hashFile(f))
			continue
		}
		var ino, dev uint64
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			ino, dev = sys.Ino, sys.Dev
		}
		fmt.Fprintf(&b, "%d %d %d\x00", dev, ino, st.ModTime().UnixNano())
	}
	return b.String()
}

func hashFile(path string) []byte {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return []byte(err.Error())
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, maxHashed)); err != nil {
		return []byte(err.Error())
	}
	return h.Sum(nil)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func existingAncestor(dir string) string {
	for !isDir(dir) {
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
	return dir
}
