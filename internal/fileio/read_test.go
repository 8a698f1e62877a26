package fileio

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// readBounded runs read in a goroutine and fails the test if it does not
// return within a few seconds: a FIFO opened for reading without
// O_NONBLOCK waits for a writer that never comes.
func readBounded(t *testing.T, read func() ([]byte, error)) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := read()
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("the read did not return: it blocked on the file")
		return nil, nil
	}
}

func TestReadRefusesWhatIsNotARegularFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, kind string
	}{
		{fifo, "a FIFO"},
		{link, "a character device"},
		{"/dev/zero", "a character device"},
		{dir, "a directory"},
	} {
		for name, read := range map[string]func(string, int64) ([]byte, error){"Read": Read, "ReadNoFollow": ReadNoFollow} {
			if name == "ReadNoFollow" && c.path == link {
				continue // a link: refused as one, below
			}
			_, err := readBounded(t, func() ([]byte, error) { return read(c.path, 1<<20) })
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s(%s) = %v, want ErrNotRegular", name, c.path, err)
				continue
			}
			if want := c.path + ": not a regular file (" + c.kind + ")"; err.Error() != want {
				t.Errorf("%s(%s) = %q, want %q", name, c.path, err, want)
			}
		}
	}
}

func TestReadSizeCap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(p, 5); err != nil || string(b) != "12345" {
		t.Errorf("Read at the cap = %q, %v; want the file", b, err)
	}
	_, err := Read(p, 4)
	if !errors.Is(err, ErrTooLarge) || err.Error() != p+": larger than 4 bytes" {
		t.Errorf("Read over the cap = %v, want %q", err, p+": larger than 4 bytes")
	}
	// A file whose size fstat does not tell (/proc reports 0) is still
	// capped by what is read.
	if _, err := Read("/proc/self/maps", 1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Read(/proc/self/maps, 1) = %v, want ErrTooLarge", err)
	}
	if _, err := Read(filepath.Join(dir, "none"), 10); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, "none")) {
		t.Errorf("Read of a missing file = %v, want ErrNotExist naming it", err)
	}
}

// A link to a regular file is read by Read (configurations are links:
// ConfigMaps, distributions' alternatives) and refused by ReadNoFollow.
func TestReadLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(link, 10); err != nil || string(b) != "x" {
		t.Errorf("Read(link) = %q, %v; want the file", b, err)
	}
	if b, err := ReadNoFollow(p, 10); err != nil || string(b) != "x" {
		t.Errorf("ReadNoFollow(file) = %q, %v; want the file", b, err)
	}
	_, err := ReadNoFollow(link, 10)
	if !errors.Is(err, unix.ELOOP) || !strings.Contains(err.Error(), link+": a symbolic link") {
		t.Errorf("ReadNoFollow(link) = %v, want a refusal naming the link", err)
	}
}

// Open makes Read's checks and gives a reader of at most max bytes: a
// FIFO and a file too large are refused at once, a regular file reads
// whole.
func TestOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readBounded(t, func() ([]byte, error) {
		r, err := Open(fifo, 10)
		if err == nil {
			r.Close()
		}
		return nil, err
	}); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a FIFO") {
		t.Errorf("a FIFO: %v", err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte("0123456789a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(big, 10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("11 bytes, at most 10: %v", err)
	}
	r, err := Open(big, 11)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var b strings.Builder
	buf := make([]byte, 4)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if b.String() != "0123456789a" {
		t.Errorf("read %q", b.String())
	}
	if _, err := Open(filepath.Join(dir, "none"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

// A file that grows past max after Open is cut off with ErrTooLarge, not
// read on.
func TestOpenGrowing(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "growing")
	if err := os.WriteFile(p, []byte("0123"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(p, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := os.WriteFile(p, []byte("0123456789abcdef"), 0o644); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	var got int
	for {
		n, err := r.Read(buf)
		got += n
		if err != nil {
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("err %v, want ErrTooLarge", err)
			}
			break
		}
	}
	if got > 8 {
		t.Errorf("read %d bytes, at most 8", got)
	}
}
