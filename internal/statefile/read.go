package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/iosched/iosched/internal/fileio"
)

// MaxSize bounds what Read reads: a state file of ten thousand disks, each
// with its settings, rules and last error, is a few MiB.
const MaxSize = 64 << 20

// ErrNotRunning: no daemon is running for that runtime directory.
var ErrNotRunning = errors.New("no daemon is running")

// Read reads the state file a running daemon keeps in runtimeDir. It returns
// ErrNotRunning (wrapped) when there is none, or when the process it names is
// gone or is not the one that wrote it (another process under a recycled
// pid).
func Read(runtimeDir string) (*State, error) {
	p := Path(runtimeDir)
	// The daemon replaces the file whole by a rename: anything else there
	// (a FIFO, a link to /dev/zero) is refused, not waited on or read
	// without end.
	b, err := fileio.ReadNoFollow(p, MaxSize)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (no %s)", ErrNotRunning, p)
	}
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if err := Verify(st.PID, st.ProcStart, st.Exe); err != nil {
		return nil, fmt.Errorf("%w (%s names pid %d: %w)", ErrNotRunning, p, st.PID, err)
	}
	return &st, nil
}
