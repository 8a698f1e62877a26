package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/statefile"
)

// A stand-in daemon: this test process, whose state file says so, answers
// each SIGHUP by taking the reload requests and writing the reload's outcome
// as the daemon would: first taken, not yet re-planned; then, after delay,
// answer(seq).
func fakeReloadingDaemon(t *testing.T, answer func(seq int) (r statefile.Reload, delay time.Duration)) string {
	t.Helper()
	dir := t.TempDir()
	var mu sync.Mutex
	st := &statefile.State{PID: os.Getpid(), ProcStart: statefile.StartTime(os.Getpid()), Exe: statefile.Exe(os.Getpid()), Started: time.Now(),
		Policy: statefile.PolicyState{Sources: []string{"/etc/iosched/policy.toml"}}, LastReload: &statefile.Reload{Seq: 4, OK: true, Done: true}}
	writeState(t, dir, st)
	hup := make(chan os.Signal, 4)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	t.Cleanup(func() { signal.Stop(hup); close(done) })
	write := func() { // from a goroutine: no t.Fatal; a failed write fails the test's wait
		mu.Lock()
		defer mu.Unlock()
		if b, err := json.Marshal(st); err == nil {
			os.WriteFile(filepath.Join(dir, "state.json.tmp"), b, 0o644)
			os.Rename(filepath.Join(dir, "state.json.tmp"), filepath.Join(dir, "state.json"))
		}
	}
	go func() {
		for seq := 5; ; seq++ {
			select {
			case <-hup:
			case <-done:
				return
			}
			var ids []string
			entries, _ := os.ReadDir(statefile.ReloadRequestDir(dir))
			for _, e := range entries {
				os.Remove(filepath.Join(statefile.ReloadRequestDir(dir), e.Name()))
				ids = append(ids, e.Name())
			}
			r, delay := answer(seq)
			r.Seq, r.Requests = seq, ids
			mu.Lock()
			i := len(st.Reloads)
			st.Reloads = append(st.Reloads, statefile.Reload{Seq: seq, OK: true, Requests: ids})
			mu.Unlock()
			write()
			go func() {
				time.Sleep(delay)
				mu.Lock()
				st.Reloads[i] = r
				st.LastReload = &r
				mu.Unlock()
				write()
			}()
		}
	}()
	return dir
}

func TestReloadWaitsForTheReplan(t *testing.T) {
	dir := fakeReloadingDaemon(t, func(int) (statefile.Reload, time.Duration) {
		return statefile.Reload{OK: true, Done: true}, 120 * time.Millisecond
	})
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
	dir := fakeReloadingDaemon(t, func(int) (statefile.Reload, time.Duration) {
		return statefile.Reload{OK: false, Done: true, Errors: []string{`/etc/iosched/policy.toml:3:1: rule 1 "x": set.nomerges: 3 is out of range 0..2`}}, 0
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

// Two reloads at once each get their own answer: the first one's valid
// policy is still being re-planned when the second one's is refused. Before
// reloads carried requests, both waited for "a reload after the one I saw"
// and the first was told its policy was refused.
func TestOverlappingReloadsGetTheirOwnAnswers(t *testing.T) {
	dir := fakeReloadingDaemon(t, func(seq int) (statefile.Reload, time.Duration) {
		if seq == 5 {
			return statefile.Reload{OK: true, Done: true}, 600 * time.Millisecond
		}
		return statefile.Reload{OK: false, Done: true, Errors: []string{"policy.toml:1:1: broken"}}, 0
	})
	type result struct {
		code   int
		stderr string
	}
	first := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := Main([]string{"reload", "--runtime-dir", dir, "--timeout", "10s"}, &out, &errb)
		first <- result{code, errb.String()}
	}()
	// The second asks once the first one's reload has taken its request.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := statefile.Read(dir)
		if err == nil && len(st.Reloads) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first reload was not taken within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"reload", "--runtime-dir", dir, "--timeout", "10s"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "broken") {
		t.Errorf("second reload (refused policy): exit %d, stderr %q", code, errb.String())
	}
	if r := <-first; r.code != 0 {
		t.Errorf("first reload (valid policy): exit %d, stderr %q", r.code, r.stderr)
	}
}

// The pid in a state file that cannot prove it is the daemon's (no start
// time, no executable: any process, pid 1 say) is not signalled. Before,
// reload sent it SIGHUP and waited.
func TestReloadSignalsOnlyTheDaemon(t *testing.T) {
	for _, tt := range []struct {
		name string
		st   statefile.State
	}{
		{"no start time", statefile.State{PID: os.Getpid(), Exe: statefile.Exe(os.Getpid())}},
		{"another executable", statefile.State{PID: os.Getpid(), ProcStart: statefile.StartTime(os.Getpid()), Exe: "/usr/sbin/iosched"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeState(t, dir, &tt.st)
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			var out, errb bytes.Buffer
			if code := Main([]string{"reload", "--runtime-dir", dir, "--timeout", "300ms"}, &out, &errb); code != 3 {
				t.Errorf("exit %d, stderr %q; want 3, no daemon", code, errb.String())
			}
		})
	}
}
