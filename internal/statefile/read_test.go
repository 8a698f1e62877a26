package statefile

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadWhenNoDaemonRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Read(dir); !errors.Is(err, ErrNotRunning) {
		t.Errorf("no state file: err = %v, want ErrNotRunning", err)
	}
	// A state file left by a process that is gone.
	writeFile(t, Path(dir), `{"pid": 2147483646, "started": "2025-01-01T00:00:00Z"}`)
	if _, err := Read(dir); !errors.Is(err, ErrNotRunning) {
		t.Errorf("dead pid: err = %v, want ErrNotRunning", err)
	}
	// A live pid that is not the process that wrote the file.
	writeFile(t, Path(dir), fmt.Sprintf(`{"pid": %d, "proc_start": 1}`, os.Getpid()))
	if _, err := Read(dir); !errors.Is(err, ErrNotRunning) {
		t.Errorf("recycled pid: err = %v, want ErrNotRunning", err)
	}
	// The same pid and start time, another executable.
	writeFile(t, Path(dir), fmt.Sprintf(`{"pid": %d, "proc_start": %d, "exe": "/usr/sbin/iosched"}`, os.Getpid(), StartTime(os.Getpid())))
	if _, err := Read(dir); !errors.Is(err, ErrNotRunning) {
		t.Errorf("another executable: err = %v, want ErrNotRunning", err)
	}
	// No start time: pid 1, say, must not be taken for the daemon.
	writeFile(t, Path(dir), fmt.Sprintf(`{"pid": %d, "exe": %q}`, os.Getpid(), Exe(os.Getpid())))
	if _, err := Read(dir); !errors.Is(err, ErrNotRunning) {
		t.Errorf("no start time: err = %v, want ErrNotRunning", err)
	}
	writeFile(t, Path(dir), fmt.Sprintf(`{"pid": %d, "proc_start": %d, "exe": %q}`, os.Getpid(), StartTime(os.Getpid()), Exe(os.Getpid())))
	if _, err := Read(dir); err != nil {
		t.Errorf("live daemon: %v", err)
	}
}

// A state file that is not one (a FIFO, a link to /dev/zero, a file larger
// than any state) is refused at once with an error naming it: status and
// reload read it. Before, a FIFO hung both and /dev/zero ran status out of
// memory.
func TestReadRefusesWhatIsNotAStateFile(t *testing.T) {
	t.Parallel()
	for name, create := range map[string]func(p string) error{
		"fifo": func(p string) error { return unix.Mkfifo(p, 0o644) },
		"link": func(p string) error { return os.Symlink("/dev/zero", p) },
		"toolarge": func(p string) error {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				return err
			}
			return os.Truncate(p, MaxSize+1) // sparse: nothing written
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := create(Path(dir)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := Read(dir)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), Path(dir)) {
					t.Errorf("Read = %v, want an error naming %s", err, Path(dir))
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Read blocked on the state file")
			}
		})
	}
}
