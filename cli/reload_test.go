package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/daemon"
)

// A stand-in daemon: this test process, whose state file says so, answers
// SIGHUP by writing the reload's outcome as the daemon would.
func fakeReloadingDaemon(t *testing.T, answer func(seq int) *daemon.Reload) string {
	t.Helper()
	dir := t.TempDir()
	st := &daemon.State{PID: os.Getpid(), Started: time.Now(), Policy: daemon.PolicyState{Sources: []string{"/etc/iosched/policy.toml"}},
		LastReload: &daemon.Reload{Seq: 4, OK: true, Done: true}}
	writeState(t, dir, st)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	t.Cleanup(func() { signal.Stop(hup); close(done) })
	write := func() { // from a goroutine: no t.Fatal; a failed write fails the test's wait
		if b, err := json.Marshal(st); err == nil {
			os.WriteFile(filepath.Join(dir, "state.json"), b, 0o644)
		}
	}
	go func() {
		select {
		case <-hup:
			// First taken, not yet re-planned; then done.
			st.LastReload = &daemon.Reload{Seq: 5, OK: true}
			write()
			time.Sleep(120 * time.Millisecond)
			st.LastReload = answer(5)
			write()
		case <-done:
		}
	}()
	return dir
}

func TestReloadWaitsForTheReplan(t *testing.T) {
	dir := fakeReloadingDaemon(t, func(seq int) *daemon.Reload { return &daemon.Reload{Seq: seq, OK: true, Done: true} })
	var out, errb bytes.Buffer
	start := time.Now()
	code := Main([]string{"reload", "--runtime-dir", dir}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "every disk re-planned") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("returned after %s, before the re-plan was done", took)
	}
}

func TestReloadReportsARefusedPolicy(t *testing.T) {
	dir := fakeReloadingDaemon(t, func(seq int) *daemon.Reload {
		return &daemon.Reload{Seq: seq, OK: false, Done: true, Errors: []string{`/etc/iosched/policy.toml:3:1: rule 1 "x": set.nomerges: 3 is out of range 0..2`}}
	})
	var out, errb bytes.Buffer
	code := Main([]string{"reload", "--runtime-dir", dir}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "policy.toml:3:1") || !strings.Contains(errb.String(), "previous one stays in force") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

func TestReloadExit3WhenNoDaemonRuns(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"reload", "--runtime-dir", t.TempDir()}, &out, &errb); code != 3 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}
