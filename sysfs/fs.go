package sysfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultRoot is where the kernel mounts sysfs.
const DefaultRoot = "/sys"

// FS is a sysfs tree rooted at a directory.
type FS struct {
	root string
}

// NewFS returns the sysfs tree rooted at root ("" means DefaultRoot). The root
// must be an existing directory.
func NewFS(root string) (FS, error) {
	if root == "" {
		root = DefaultRoot
	}
	st, err := os.Stat(root)
	if err != nil {
		return FS{}, fmt.Errorf("sysfs root: %w", err)
	}
	if !st.IsDir() {
		return FS{}, fmt.Errorf("sysfs root %s: not a directory", root)
	}
	return FS{root: filepath.Clean(root)}, nil
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

// Disks lists the names of whole block disks, sorted, never partitions. It
// reads class/block (every block device, partitions included, each with a
// "partition" file when it is one) and falls back to block/ (disks only) on
// trees that lack it.
func (s FS) Disks() ([]string, error) {
	entries, err := os.ReadDir(s.path("class", "block"))
	usedClass := err == nil
	if err != nil {
		entries, err = os.ReadDir(s.path("block"))
		if err != nil {
			return nil, fmt.Errorf("listing block devices: %w", err)
		}
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		name := e.Name()
		if ValidateName(name) != nil {
			continue
		}
		if usedClass {
			if _, err := os.Lstat(s.path("class", "block", name, "partition")); err == nil {
				continue
			}
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// Exists reports whether name is a block device in the tree.
func (s FS) Exists(name string) bool {
	if ValidateName(name) != nil {
		return false
	}
	_, err := os.Stat(s.blockDir(name))
	return err == nil
}

// blockDir is the device's directory through the block/ links, falling back to
// class/block for trees (and kernels) where block/ is absent.
func (s FS) blockDir(name string) string {
	p := s.path("block", name)
	if _, err := os.Lstat(p); err == nil {
		return p
	}
	return s.path("class", "block", name)
}
