package policy

import (
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/iosched/iosched/internal/fileio"
	"github.com/iosched/iosched/internal/paths"
)

// Size limits. A policy is a few KiB of TOML; the limits keep a file that is
// not one (a link to /dev/zero, a log file given by mistake) from being read
// without bound.
const (
	MaxFileSize   = 1 << 20 // one file
	MaxPolicySize = 4 << 20 // all files of one policy together
)

//go:embed default.toml
var embedded []byte

// Embedded returns the default policy built into the binary, used when no
// policy file exists.
func Embedded() []byte { return append([]byte{}, embedded...) }

// Load reads the policy at path: a file, or a directory whose *.toml files
// are read in lexical order as one policy. With path "", it reads
// paths.Default.PolicyFile and then PolicyDir/*.toml, and when none of them exists, the
// embedded default (Sources is then ["<embedded>"]). An invalid policy's
// error is a *Errors. Only regular files (or links to them) are read, none
// larger than MaxFileSize, all together no larger than MaxPolicySize: a
// FIFO, a device or an oversized file is an error.
func Load(path string) (*Policy, error) {
	return DefaultLocations.load(path)
}

// Locations are where a policy is read from when no path is given: the
// main file, then the drop-in directory.
type Locations struct {
	File, Dir string
}

// DefaultLocations are the installed policy file and directory.
var DefaultLocations = Locations{File: paths.Default.PolicyFile, Dir: paths.Default.PolicyDir}

// IsPolicyFile reports whether a directory entry of that name is one of a
// policy directory's files: named *.toml and not hidden (editor droppings
// such as ".#x.toml" and ".x.toml.swp" are not). Every other entry, a log
// file beside the policy included, is no part of the policy.
func IsPolicyFile(name string) bool {
	return strings.HasSuffix(name, ".toml") && !strings.HasPrefix(name, ".")
}

// Files names the files that make up the policy at path (as Load takes
// it; "" for l's locations), in the order they are read, without reading
// them: the one answer to which files are the policy, for the loader and
// for whatever follows the files for changes. With path "", the main file
// is named whether or not it exists (its creation changes the policy); an
// absent drop-in directory names nothing. The error is the one Load would
// give for the same listing.
func (l Locations) Files(path string) ([]string, error) {
	if path != "" {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		if !fi.IsDir() {
			return []string{path}, nil
		}
		files, err := dirFiles(path)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("policy: no *.toml files in %s", path)
		}
		return files, nil
	}
	files := []string{l.File}
	switch more, err := dirFiles(l.Dir); {
	case err == nil:
		files = append(files, more...)
	case !errors.Is(err, fs.ErrNotExist):
		return files, err
	}
	return files, nil
}

func (l Locations) load(path string) (*Policy, error) {
	files, err := l.read(path)
	if err != nil {
		return nil, err
	}
	return Parse(files...)
}

// read reads the files Files names. With path "", an absent main file is
// left out, and when nothing is left the embedded default is the policy.
func (l Locations) read(path string) ([]File, error) {
	names, err := l.Files(path)
	if err != nil {
		return nil, err
	}
	budget := int64(MaxPolicySize)
	var files []File
	for i, name := range names {
		f, err := readFile(name, &budget)
		if path == "" && i == 0 && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return []File{{Name: EmbeddedName, Data: Embedded()}}, nil
	}
	return files, nil
}

// readFile reads one policy file, taking its size from budget (what the
// whole policy may still read).
func readFile(path string, budget *int64) (File, error) {
	limit := min(int64(MaxFileSize), *budget)
	b, err := fileio.Read(path, limit)
	if errors.Is(err, fileio.ErrTooLarge) && limit < MaxFileSize {
		return File{}, fmt.Errorf("policy: %s: the policy's files are larger than %d bytes together", path, MaxPolicySize)
	}
	if err != nil {
		return File{}, fmt.Errorf("policy: %w", err)
	}
	*budget -= int64(len(b))
	return File{Name: path, Data: b}, nil
}

// dirFiles lists dir's policy files (IsPolicyFile) in lexical order.
// Anything named so that cannot be read is the loader's error, not
// silently left out.
func dirFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	var files []string
	for _, e := range entries {
		if IsPolicyFile(e.Name()) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	return files, nil
}
