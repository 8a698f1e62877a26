package fileio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Options say how a file is written.
type Options struct {
	// NoMkdir: path's directory must exist already (it is another
	// program's, such as node_exporter's textfile directory, and a missing
	// one is an error to report, not a directory to make).
	NoMkdir bool
	// Sync flushes the file to the disk before it is renamed into place,
	// for a record that must outlive a crash of the machine (remembered
	// probe results). Records that describe this boot need not pay for it:
	// a crash that loses the last write leaves the one before it.
	Sync bool
}

// Write writes b to a temporary file beside path and renames it over path,
// creating path's directory when missing, without fsync: see Options.
func Write(path string, b []byte) error { return WriteWith(path, b, Options{}) }

// WriteWith is Write with options. The temporary file's name starts with a
// dot and ends in random digits, so a reader of *.json or *.prom files never
// takes it for one.
func WriteWith(path string, b []byte, o Options) error {
	dir := filepath.Dir(path)
	if !o.NoMkdir {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	var serr error
	if o.Sync {
		serr = f.Sync()
	}
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr, os.Chmod(f.Name(), 0o644)); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
