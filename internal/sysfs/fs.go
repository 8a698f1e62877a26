package sysfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/iosched/iosched/internal/paths"
	"golang.org/x/sys/unix"
)

// FS is a sysfs tree rooted at a directory.
type FS struct {
	root string
	// dir is the root opened O_PATH: queue attributes are opened from it
	// with openat2(RESOLVE_IN_ROOT), so no link in a copied or fake tree can
	// lead a write out of it (an absolute link resolves inside the root).
	dir *os.File
	// noBlock: the tree has no block/ directory; disks are found through
	// class/block instead.
	noBlock bool
	// paths remembers where each disk read lives, so its queue attributes
	// are opened by their own path rather than through block/NAME.
	paths *pathCache
	// live: the root is a sysfs mount, so a missing attribute is the
	// kernel's statement, not a file a copy left out.
	live bool
	// parents holds open the directories disks sit in, as their uevents
	// name them (devices/virtual/block), for Open.
	parents *parentDirs
}

// parentDirs are directories that hold disks' directories, opened once
// (O_PATH, confined to the root) by their path from the root, so that a
// disk's own directory is one lookup from there, where from the root it
// is four or more (devices/virtual/block/loop7), each a turn of kernfs's
// lock, which creating a disk takes for each of its files.
type parentDirs struct {
	mu sync.Mutex
	m  map[string]*parentDir
}

// parentDir is one held directory. A descriptor is closed only once no
// one uses it (users), so that no open goes through a number the process
// has since given to another file.
type parentDir struct {
	fd    int
	users int
	stale bool // out of the map: closed when the last user is done
}

// maxParents bounds the directories held: a machine has a handful that
// disks sit in (one a controller); past it they are let go and opened
// again as needed.
const maxParents = 64

// use returns the directory rel, opened when it is not held yet; done must
// be called with it after use.
func (c *parentDirs) use(s FS, rel string) (*parentDir, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pd := c.m[rel]
	if pd == nil {
		fd, err := openat2(int(s.dir.Fd()), rel, unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_IN_ROOT)
		if err != nil {
			return nil, false
		}
		if len(c.m) >= maxParents {
			for k, old := range c.m {
				c.dropLocked(k, old)
			}
		}
		pd = &parentDir{fd: fd}
		c.m[rel] = pd
	}
	pd.users++
	return pd, true
}

func (c *parentDirs) done(pd *parentDir) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pd.users--
	if pd.stale && pd.users == 0 {
		unix.Close(pd.fd)
	}
}

// forget lets rel's directory go when it is still pd: nothing was found
// in it, and it may have been removed (a controller unplugged).
func (c *parentDirs) forget(rel string, pd *parentDir) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[rel] == pd {
		c.dropLocked(rel, pd)
	}
}

func (c *parentDirs) dropLocked(rel string, pd *parentDir) {
	delete(c.m, rel)
	pd.stale = true
	if pd.users == 0 {
		unix.Close(pd.fd)
	}
}

// pathCache maps disk names to their directories relative to the root, as
// resolve found them. Opening "devices/virtual/block/loop7/queue/scheduler"
// looks up six names; "block/loop7/queue/scheduler" nine, the link
// included, and every lookup takes kernfs's lock, which the kernel holds to
// add each switched scheduler's iosched/ files: with 1000 disks switched at
// once the lookups, not the writes, were the daemon's cost (perf). A path
// that stopped working is forgotten and block/NAME used again.
type pathCache struct {
	mu sync.Mutex
	m  map[string]string
}

// maxPaths bounds the cache: past it (disks churned by the thousand), it
// starts again empty.
const maxPaths = 8192

func (c *pathCache) get(name string) string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[name]
}

func (c *pathCache) set(name, rel string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxPaths {
		c.m = map[string]string{}
	}
	c.m[name] = rel
}

func (c *pathCache) forget(name string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, name)
}

// NewFS returns the sysfs tree rooted at root ("" means paths.Default.Sys). The root
// must be an existing directory.
func NewFS(root string) (FS, error) {
	if root == "" {
		root = paths.Default.Sys
	}
	st, err := os.Stat(root)
	if err != nil {
		return FS{}, fmt.Errorf("sysfs root: %w", err)
	}
	if !st.IsDir() {
		return FS{}, fmt.Errorf("sysfs root %s: not a directory", root)
	}
	fs := FS{root: filepath.Clean(root), paths: &pathCache{m: map[string]string{}}, parents: &parentDirs{m: map[string]*parentDir{}}}
	// The descriptor lives as long as the FS; os.File's finalizer closes
	// it when the FS is dropped.
	if fs.dir, err = os.OpenFile(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return FS{}, fmt.Errorf("sysfs root: %w", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "block")); err != nil {
		fs.noBlock = true
		if _, err := os.Lstat(filepath.Join(root, "class", "block")); err != nil {
			if hint := nestedTree(root); hint != "" {
				fs.dir.Close()
				return FS{}, &NestedRootError{Root: root, Tree: hint}
			}
		}
	}
	var sfs unix.Statfs_t
	fs.live = unix.Fstatfs(int(fs.dir.Fd()), &sfs) == nil && sfs.Type == unix.SYSFS_MAGIC
	return fs, nil
}

// NestedRootError is a root given one directory too high: it has no
// block/ or class/block/, but Tree (Root/sys) has, as a copied tree often
// does.
type NestedRootError struct{ Root, Tree string }

func (e *NestedRootError) Error() string {
	return fmt.Sprintf("sysfs root %s has no block/ or class/block/, but %s has", e.Root, e.Tree)
}

// nestedTree is root/sys when root is the directory above a sysfs tree (a
// capture that keeps sys/ beside proc/ or dev/), else "".
func nestedTree(root string) string {
	nested := filepath.Join(root, "sys")
	for _, dir := range []string{"block", filepath.Join("class", "block")} {
		if st, err := os.Stat(filepath.Join(nested, dir)); err == nil && st.IsDir() {
			return nested
		}
	}
	return ""
}

// Live reports whether the root is a sysfs mount (the kernel's own view,
// not a copy).
func (s FS) Live() bool { return s.live }

// rootAbs is the root made absolute, its own links kept: the lexical frame
// resolve works in.
func (s FS) rootAbs() string {
	abs, err := filepath.Abs(s.root)
	if err != nil {
		return s.root
	}
	return abs
}

// Root is the directory the tree is rooted at.
func (s FS) Root() string { return s.root }

// path joins elements under the root. Callers validate names first.
func (s FS) path(elem ...string) string {
	return filepath.Join(append([]string{s.root}, elem...)...)
}

// ErrInvalidName is returned for a device name that could not be a kernel
// block device name; no path is ever built from such a name.
var ErrInvalidName = errors.New("invalid device name")

// ErrNoDevice is returned when a device does not exist (or went away).
var ErrNoDevice = errors.New("no such block device")

// ValidateName checks that name is usable as a single path element: not
// empty, not "." or "..", and free of '/' and NUL.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("%w: %q contains '/' or NUL", ErrInvalidName, name)
	case len(name) > 255:
		return fmt.Errorf("%w: longer than 255 bytes", ErrInvalidName)
	}
	return nil
}

// Disks lists the names of whole block disks, never partitions, in natural
// order (loop2 before loop10, nvme2n1 before nvme10n1). It reads block/,
// which holds disks only (one getdents, no stat per entry: the daemon's
// rescan of 1000 disks starts here), and on trees without block/ reads
// class/block, skipping the partitions (see partitionOf).
func (s FS) Disks() ([]string, error) {
	dir := s.path("block")
	if s.noBlock {
		dir = s.path("class", "block")
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("listing block devices: %w", err)
	}
	all, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("listing block devices: %w", err)
	}
	names := all[:0]
	for _, name := range all {
		if ValidateName(name) != nil {
			continue
		}
		if s.noBlock {
			if dir, err := filepath.EvalSymlinks(s.path("class", "block", name)); err == nil {
				if _, part := partitionOf(dir); part {
					continue
				}
			}
		}
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return naturalLess(names[i], names[j]) })
	return names, nil
}

// naturalLess orders names as people read them: runs of digits compare as
// numbers, everything else byte by byte.
func naturalLess(a, b string) bool {
	ka, kb := naturalKey(a), naturalKey(b)
	for i := 0; i < len(ka) && i < len(kb); i++ {
		x, y := ka[i], kb[i]
		if x.num != y.num {
			return !x.num // letters before digits
		}
		if x.num {
			// Compare digit runs by value: strip leading zeros, then
			// by length, then lexically.
			xs, ys := strings.TrimLeft(x.s, "0"), strings.TrimLeft(y.s, "0")
			if len(xs) != len(ys) {
				return len(xs) < len(ys)
			}
			if xs != ys {
				return xs < ys
			}
		} else if x.s != y.s {
			return x.s < y.s
		}
	}
	if len(ka) != len(kb) {
		return len(ka) < len(kb)
	}
	return a < b
}

type naturalPart struct {
	s   string
	num bool
}

func naturalKey(s string) []naturalPart {
	var parts []naturalPart
	for i := 0; i < len(s); {
		j := i
		num := s[i] >= '0' && s[i] <= '9'
		for j < len(s) && (s[j] >= '0' && s[j] <= '9') == num {
			j++
		}
		parts = append(parts, naturalPart{s[i:j], num})
		i = j
	}
	return parts
}

// Exists reports whether name is a block device in the tree.
func (s FS) Exists(name string) bool {
	if ValidateName(name) != nil {
		return false
	}
	return s.exists(name)
}

// exists is Exists for a name already checked.
func (s FS) exists(name string) bool {
	_, err := os.Stat(s.blockDir(name))
	return err == nil
}

// blockDir is the device's directory through the block/ links, or through
// class/block for trees (and kernels) where block/ is absent.
func (s FS) blockDir(name string) string {
	return s.path(s.blockRel(name))
}

// blockRel is blockDir relative to the root.
func (s FS) blockRel(name string) string {
	if s.noBlock {
		return filepath.Join("class", "block", name)
	}
	return filepath.Join("block", name)
}
