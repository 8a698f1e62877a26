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
// DefaultFile and then DefaultDir/*.toml, and when none of them exists, the
// embedded default (Sources is then ["<embedded>"]). An invalid policy's
// error is a *Errors. Only regular files (or links to them) are read, none
// larger than MaxFileSize, all together no larger than MaxPolicySize: a
// FIFO, a device or an oversized file is an error.
func Load(path string) (*Policy, error) {
	return loader{file: paths.Default.PolicyFile, dir: paths.Default.PolicyDir}.load(path)
}

// loader holds the default locations, so tests can point them at temporary
// directories.
type loader struct {
	file, dir string
}

func (l loader) load(path string) (*Policy, error) {
	files, err := l.files(path)
	if err != nil {
		return nil, err
	}
	return Parse(files...)
}

func (l loader) files(path string) ([]File, error) {
	budget := int64(MaxPolicySize)
	if path != "" {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		if !fi.IsDir() {
			f, err := readFile(path, &budget)
			if err != nil {
				return nil, err
			}
			return []File{f}, nil
		}
		files, err := readDir(path, &budget)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("policy: no *.toml files in %s", path)
		}
		return files, nil
	}

	var files []File
	switch f, err := readFile(l.file, &budget); {
	case err == nil:
		files = append(files, f)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	switch more, err := readDir(l.dir, &budget); {
	case err == nil:
		files = append(files, more...)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
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

// readDir reads dir's *.toml files in lexical order. Hidden files (editor
// droppings such as ".#x.toml") are skipped; anything else named *.toml
// that cannot be read is an error, not silently left out.
func readDir(dir string, budget *int64) ([]File, error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	var files []File
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".toml") || strings.HasPrefix(name, ".") {
			continue
		}
		f, err := readFile(filepath.Join(dir, name), budget)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}
