package cli

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/sysfs"
)

// TestIntegrationProbeCallerGoes: the caller of `iosched probe` goes away
// mid-measurement, a candidate on the disk: its terminal or SSH session
// closes (SIGHUP), its output is piped to a reader that leaves (`iosched
// probe ... 2>&1 | head -1`, then the next progress line meets a closed
// pipe: SIGPIPE), or only its stdout's reader leaves (`| true`). Each time
// the probe must put the original settings back, remove its record and
// exit 1, never die of the signal. (Before, SIGHUP and SIGPIPE killed it
// and the disk stayed on a candidate until the next probe or daemon
// start.)
func TestIntegrationProbeCallerGoes(t *testing.T) {
	looptest.Require(t)
	fs, _ := sysfs.NewFS("/sys")
	for i, tc := range []struct {
		name string
		// combined: stdout and stderr are one pipe, whose first line
		// the test reads before closing it; else stderr is kept.
		combined, closeStdout, hangup bool
		wantErr                       string // in the kept stderr
	}{
		{name: "SIGHUP", hangup: true, wantErr: "hangup received"},
		{name: "pipe of both closed", combined: true, closeStdout: true},
		{name: "stdout closed", closeStdout: true, wantErr: errOutputClosed.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := looptest.Add(t, 7380+i)
			l.Bind(t, 64<<20)
			orig := kyberOrBFQ(t, fs, l.Name)
			if err := fs.WriteQueueAttr(l.Name, "nr_requests", "32"); err != nil {
				t.Fatal(err)
			}
			state := t.TempDir()
			record := filepath.Join(state, "probe-"+l.Name+".originals.json")

			child := exec.Command(os.Args[0])
			child.Env = append(os.Environ(), "IOSCHED_CLI_CHILD_ARGS="+strings.Join(
				[]string{"probe", l.Name, "--state-dir", state, "--fresh", "--duration", "2s", "--rounds", "3"}, "\n"))
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var childErr bytes.Buffer
			child.Stdout, child.Stderr = w, &childErr
			if tc.combined {
				child.Stderr = w
			}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			if tc.combined {
				line, err := bufio.NewReader(r).ReadString('\n')
				if err != nil || !strings.HasPrefix(line, "sizing "+l.Name) {
					t.Fatalf("first line %q, %v", line, err)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				cur, _ := fs.ReadQueueAttr(l.Name, "scheduler")
				if _, err := os.Stat(record); err == nil && cur != orig {
					break
				}
				if time.Now().After(deadline) {
					child.Process.Kill()
					child.Wait()
					t.Fatalf("the probe never switched the scheduler\n%s", childErr.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			start := time.Now()
			if tc.hangup {
				if err := child.Process.Signal(syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
			}
			if tc.closeStdout {
				r.Close()
			}
			err = child.Wait()
			t.Logf("%v after %s\n%s", err, time.Since(start), childErr.String())
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("exit: %v, want status 1", err)
			}
			if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() || ws.ExitStatus() != 1 {
				t.Errorf("the probe ended by %v, want exit status 1 after restoring", ee)
			}
			// The budget of 3 rounds of 2 s is over 20 s: it stopped
			// for its caller, not at its end.
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the probe went on for %s after its caller left", took)
			}
			d, err := fs.Device(l.Name)
			if err != nil {
				t.Fatal(err)
			}
			if *d.Scheduler != orig || d.Tunables["nr_requests"] != "32" {
				t.Errorf("after the probe: scheduler %s nr_requests %s, want %s and 32 (restored)", *d.Scheduler, d.Tunables["nr_requests"], orig)
			}
			if _, err := os.Stat(record); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the record is still there: %v", err)
			}
			if tc.wantErr != "" {
				for _, want := range []string{tc.wantErr, "original settings restored (scheduler " + orig + ")"} {
					if !strings.Contains(childErr.String(), want) {
						t.Errorf("stderr does not say %q:\n%s", want, childErr.String())
					}
				}
			}
		})
	}
}
