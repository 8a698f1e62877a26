package policywatch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/policy"
)

const debounce = 50 * time.Millisecond

// followed is what a test knows of a watcher it follows with: a
// directory the watcher watches whose other files are no policy (where a
// marker file is written, see settle), and the watcher's checks.
type followed struct {
	markerDir string
	checks    chan []string
	markers   int
	// events are the names of the events the watcher checked the files
	// after, the markers' left out.
	events []string
}

var following sync.Map // *Watcher -> *followed

// follow starts a watcher on path (or, with path "", on the default
// locations file and dir) and stops it at the end of the test.
func follow(t *testing.T, path, file, dir string) *Watcher {
	t.Helper()
	w, err := newWatcher(Options{Path: path, Debounce: debounce, Log: slog.New(slog.DiscardHandler)}, policy.Locations{File: file, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	f := &followed{markerDir: filepath.Dir(file), checks: make(chan []string, 64)}
	if path != "" {
		f.markerDir = path
		if !isDir(path) {
			f.markerDir = filepath.Dir(path)
		}
	}
	w.checked = func(events []string) { f.checks <- events }
	w.alsoFollow = func(name string) bool { return strings.HasPrefix(filepath.Base(name), ".marker-") }
	following.Store(w, f)
	t.Cleanup(func() { following.Delete(w) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return w
}

// expect checks that what the test just did gives exactly n signals:
// those that come until the watcher has checked the files after all of it
// (settle).
func expect(t *testing.T, w *Watcher, n int, what string) {
	t.Helper()
	if got := settle(t, w, true); got != n {
		t.Errorf("%s: %d reload signal(s), want %d", what, got, n)
	}
}

// settle writes a marker file (hidden, not *.toml, beside the policy:
// never part of it) and waits until the watcher has checked the files
// after the marker's event, so after every event before it, and returns
// the signals taken meanwhile (none taken unless take).
func settle(t *testing.T, w *Watcher, take bool) int {
	t.Helper()
	v, _ := following.Load(w)
	f := v.(*followed)
	f.markers++
	marker := fmt.Sprintf(".marker-%d", f.markers)
	write(t, filepath.Join(f.markerDir, marker), "")
	changed := w.Changed()
	if !take {
		changed = nil
	}
	got := 0
	timeout := time.After(5 * time.Second)
	for {
		select {
		case <-changed:
			got++
		case events := <-f.checks:
			for _, e := range events {
				if !strings.HasPrefix(filepath.Base(e), ".marker-") {
					f.events = append(f.events, e)
				}
			}
			if !slices.ContainsFunc(events, func(e string) bool { return filepath.Base(e) == marker }) {
				continue
			}
			if take { // a signal of that last check
				select {
				case <-changed:
					got++
				default:
				}
			}
			return got
		case <-timeout:
			t.Fatalf("the watcher did not check the files within 5 s of an event (%d signals meanwhile)", got)
		}
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

const rule = "[[rule]]\nname = %q\n[rule.match]\nclass = \"loop\"\n"

// kubeletDir lays out a ConfigMap volume as kubelet does
// (pkg/volume/util/atomic_writer.go): the keys' files in a timestamped
// directory, ..data a link to it, and one link per key through ..data.
func kubeletDir(t *testing.T, keys map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	ts := "..2026_11_30_15_00_00.000000001"
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range keys {
		write(t, filepath.Join(dir, ts, k), v)
		symlink(t, filepath.Join("..data", k), filepath.Join(dir, k))
	}
	symlink(t, ts, filepath.Join(dir, "..data"))
	return dir
}

// kubeletUpdate does what kubelet does on a ConfigMap update: write the
// new keys into a new timestamped directory, point ..data_tmp at it,
// rename ..data_tmp over ..data (the one atomic step), add the links of
// new keys, remove the old directory and the links of keys gone.
func kubeletUpdate(t *testing.T, dir string, n int, keys map[string]string) {
	t.Helper()
	old, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	ts := fmt.Sprintf("..2026_11_30_15_%02d_00.%09d", n, n)
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range keys {
		write(t, filepath.Join(dir, ts, k), v)
	}
	symlink(t, ts, filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if _, err := os.Lstat(filepath.Join(dir, k)); os.IsNotExist(err) {
			symlink(t, filepath.Join("..data", k), filepath.Join(dir, k))
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, old))
	for _, e := range entries {
		if _, still := keys[e.Name()]; !still {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
		t.Fatal(err)
	}
}

// A ConfigMap mounted at /etc/iosched with one key, policy.toml, and the
// daemon run with --policy /etc/iosched/policy.toml: the file itself (a
// link through ..data) never changes, only what ..data points to.
func TestKubeletConfigMapFileKey(t *testing.T) {
	t.Parallel()
	dir := kubeletDir(t, map[string]string{"policy.toml": fmt.Sprintf(rule, "v1")})
	w := follow(t, filepath.Join(dir, "policy.toml"), "", "")
	expect(t, w, 0, "at start")

	kubeletUpdate(t, dir, 1, map[string]string{"policy.toml": fmt.Sprintf(rule, "v2")})
	expect(t, w, 1, "the first update")
	kubeletUpdate(t, dir, 2, map[string]string{"policy.toml": fmt.Sprintf(rule, "v3")})
	expect(t, w, 1, "the second update (the new timestamped directory is followed)")
	// kubelet resyncs without a change: same data in a new directory.
	kubeletUpdate(t, dir, 3, map[string]string{"policy.toml": fmt.Sprintf(rule, "v3")})
	expect(t, w, 0, "an update with the same data")
}

// A ConfigMap with several keys mounted as the policy directory
// (--policy /etc/iosched/policy.d): an update that adds a key.
func TestKubeletConfigMapDirectory(t *testing.T) {
	t.Parallel()
	dir := kubeletDir(t, map[string]string{"10-base.toml": fmt.Sprintf(rule, "base")})
	w := follow(t, dir, "", "")
	kubeletUpdate(t, dir, 1, map[string]string{"10-base.toml": fmt.Sprintf(rule, "base"), "20-more.toml": fmt.Sprintf(rule, "more")})
	expect(t, w, 1, "a key added")
	kubeletUpdate(t, dir, 2, map[string]string{"20-more.toml": fmt.Sprintf(rule, "more")})
	expect(t, w, 1, "a key removed")
}

// A plain file: written in place, saved by an editor (a new file renamed
// over it), touched without a change.
func TestPlainFileEdits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.toml")
	write(t, p, fmt.Sprintf(rule, "v1"))
	w := follow(t, p, "", "")

	write(t, p, fmt.Sprintf(rule, "v2"))
	expect(t, w, 1, "an edit in place")

	tmp := filepath.Join(dir, ".policy.toml.swp")
	write(t, tmp, fmt.Sprintf(rule, "v3"))
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	expect(t, w, 1, "an editor's save by rename")

	// Many writes in a burst are one reload.
	for i := range 20 {
		write(t, p, fmt.Sprintf(rule, fmt.Sprint("burst ", i)))
		time.Sleep(debounce / 10)
	}
	expect(t, w, 1, "a burst of writes")

	write(t, p, fmt.Sprintf(rule, "burst 19"))
	expect(t, w, 0, "the same text written again")
	write(t, filepath.Join(dir, "unrelated.toml"), "x")
	expect(t, w, 0, "another file in the directory")

	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	expect(t, w, 1, "the file removed (the reload reports it; the old policy stays)")
}

// The default locations: the main file, and policy.d created after the
// daemon started, then a drop-in added, a hidden file (an editor's), and a
// file that is not *.toml.
func TestDefaultLocationsDropIn(t *testing.T) {
	t.Parallel()
	etc := t.TempDir()
	file, dropIn := filepath.Join(etc, "policy.toml"), filepath.Join(etc, "policy.d")
	write(t, file, fmt.Sprintf(rule, "main"))
	w := follow(t, "", file, dropIn)

	if err := os.Mkdir(dropIn, 0o755); err != nil {
		t.Fatal(err)
	}
	expect(t, w, 0, "an empty policy.d created")
	write(t, filepath.Join(dropIn, "50-new.toml"), fmt.Sprintf(rule, "new"))
	expect(t, w, 1, "a new file in policy.d")
	write(t, filepath.Join(dropIn, ".50-new.toml.swp"), "junk")
	write(t, filepath.Join(dropIn, "README"), "junk")
	expect(t, w, 0, "a hidden file and a file not named *.toml")
	write(t, filepath.Join(dropIn, "50-new.toml"), fmt.Sprintf(rule, "edited"))
	expect(t, w, 1, "a drop-in edited")
	write(t, file, fmt.Sprintf(rule, "main edited"))
	expect(t, w, 1, "the main file edited")
}

// A FIFO put in a policy file's place must not block the watcher (opening
// it would wait for a writer): it is a change, signalled, and the watcher
// goes on.
func TestFIFOInPlaceDoesNotBlock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.toml")
	write(t, p, fmt.Sprintf(rule, "v1"))
	w := follow(t, dir, "", "")
	fifo := filepath.Join(dir, "20-fifo.toml")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	expect(t, w, 1, "a FIFO added")
	write(t, p, fmt.Sprintf(rule, "v2"))
	expect(t, w, 1, "an edit after the FIFO")
}

// Signals not taken are coalesced: a daemon busy reloading gets one more,
// not a queue of them.
func TestSignalsCoalesce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.toml")
	write(t, p, fmt.Sprintf(rule, "v1"))
	w := follow(t, p, "", "")
	for i := range 3 {
		write(t, p, fmt.Sprintf(rule, fmt.Sprint("v", i+2)))
		settle(t, w, false) // checked, and signalled, before the next
	}
	expect(t, w, 1, "three changes not taken")
}

// Files in the policy's directories that are no part of the policy (a log
// file the daemon's own stderr goes to, an editor's swap file, a README)
// are not followed: their events wake nothing and log nothing. Before,
// every write to such a file was a "policy file event", logged at debug:
// with the log in that directory each line begot the next.
func TestOtherFilesAreNotFollowed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.toml")
	write(t, p, fmt.Sprintf(rule, "v1"))
	for _, path := range []string{p, dir} {
		w := follow(t, path, "", "")
		for i := range 20 {
			write(t, filepath.Join(dir, "iosched.log"), fmt.Sprint("line ", i))
			write(t, filepath.Join(dir, ".policy.toml.swp"), fmt.Sprint("swap ", i))
			write(t, filepath.Join(dir, "README"), fmt.Sprint("text ", i))
		}
		expect(t, w, 0, "other files written")
		v, _ := following.Load(w)
		if got := v.(*followed).events; len(got) != 0 {
			t.Errorf("--policy %s: the watcher woke for files that are no policy: %q", path, got)
		}
		write(t, p, fmt.Sprintf(rule, path))
		expect(t, w, 1, "the policy edited after them")
	}
}

// A policy file reached through a chain of links, one of them not named
// ..data, swapped atomically for one to a new directory: the link swapped
// is followed, whatever its name.
func TestLinkOnTheWaySwapped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i := range 3 {
		gen := filepath.Join(dir, fmt.Sprint("gen", i))
		if err := os.Mkdir(gen, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(gen, "policy.toml"), fmt.Sprintf(rule, fmt.Sprint("gen ", i)))
	}
	symlink(t, "gen0", filepath.Join(dir, "current"))
	p := filepath.Join(dir, "policy.toml")
	symlink(t, filepath.Join("current", "policy.toml"), p)
	w := follow(t, p, "", "")
	for i := 1; i < 3; i++ {
		tmp := filepath.Join(dir, "current.tmp")
		symlink(t, fmt.Sprint("gen", i), tmp)
		if err := os.Rename(tmp, filepath.Join(dir, "current")); err != nil {
			t.Fatal(err)
		}
		expect(t, w, 1, "the link on the way swapped")
	}
}
