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

	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/statefile"
)

// A stand-in daemon: this test process, whose state file says so, answers
// each SIGHUP by taking the reload requests and writing the reload's outcome
// as the daemon would: first taken, not yet re-planned; then, once
// replanned is closed (nil: at once), answer(seq).
func fakeReloadingDaemon(t *testing.T, answer func(seq int) (r statefile.Reload, replanned <-chan struct{})) string {
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
			r, replanned := answer(seq)
			r.Seq, r.Requests = seq, ids
			mu.Lock()
			i := len(st.Reloads)
			st.Reloads = append(st.Reloads, statefile.Reload{Seq: seq, OK: true, Requests: ids})
			mu.Unlock()
			write()
			go func() {
				if replanned != nil {
					select {
					case <-replanned:
					case <-done:
						return
					}
				}
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

// stepReloadPoll makes reload's waits between reads of the state file
// wait for the test: each wait sends on the channel returned, then waits
// for the test to send back.
func stepReloadPoll(t *testing.T) chan struct{} {
	step := make(chan struct{})
	saved := reloadPoll
	reloadPoll = func() {
		step <- struct{}{}
		<-step
	}
	t.Cleanup(func() { reloadPoll = saved })
	return step
}

// reload waits, reading the state file, until the reload that took its
// request has re-planned every disk: here it reads the reload taken but
// not re-planned, and goes on waiting.
func TestReloadWaitsForTheReplan(t *testing.T) {
	replanned := make(chan struct{})
	dir := fakeReloadingDaemon(t, func(int) (statefile.Reload, <-chan struct{}) {
		return statefile.Reload{OK: true, Done: true}, replanned
	})
	step := stepReloadPoll(t)
	type result struct {
		code     int
		out, err string
	}
	ran := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := Main([]string{"reload", "--runtime-dir", dir, "--timeout", "10s"}, &out, &errb)
		ran <- result{code, out.String(), errb.String()}
	}()
	next := func() { // lets reload read the state file once, and waits until it is back in its wait
		step <- struct{}{}
		select {
		case <-step:
		case r := <-ran:
			t.Fatalf("reload returned (exit %d, %q %q) with the reload taken but not re-planned", r.code, r.out, r.err)
		}
	}
	<-step // reload has signalled the daemon
	eventually.True(t, 5*time.Second, "the reload to be taken", func() bool {
		st, err := statefile.Read(dir)
		return err == nil && len(st.Reloads) == 1 && !st.Reloads[0].Done
	})
	next()
	close(replanned)
	eventually.True(t, 5*time.Second, "the re-plan in the state file", func() bool {
		st, err := statefile.Read(dir)
		return err == nil && len(st.Reloads) == 1 && st.Reloads[0].Done
	})
	step <- struct{}{}
	r := <-ran
	if r.code != 0 || !strings.Contains(r.out, "every disk re-planned") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
}

func TestReloadReportsARefusedPolicy(t *testing.T) {
	dir := fakeReloadingDaemon(t, func(int) (statefile.Reload, <-chan struct{}) {
		return statefile.Reload{OK: false, Done: true, Errors: []string{`/etc/iosched/policy.toml:3:1: rule 1 "x": set.nomerges: 3 is out of range 0..2`}}, nil
	})
	var out, errb bytes.Buffer
	code := Main([]string{"reload", "--runtime-dir", dir}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "policy.toml:3:1") || !strings.Contains(errb.String(), "previous one stays in force") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

func TestReloadExit3WhenNoDaemonRuns(t *testing.T) {
	t.Parallel()
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
	firstReplanned := make(chan struct{})
	dir := fakeReloadingDaemon(t, func(seq int) (statefile.Reload, <-chan struct{}) {
		if seq == 5 {
			return statefile.Reload{OK: true, Done: true}, firstReplanned
		}
		return statefile.Reload{OK: false, Done: true, Errors: []string{"policy.toml:1:1: broken"}}, nil
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
	eventually.True(t, 5*time.Second, "the first reload to be taken", func() bool {
		st, err := statefile.Read(dir)
		return err == nil && len(st.Reloads) == 1
	})
	var out, errb bytes.Buffer
	if code := Main([]string{"reload", "--runtime-dir", dir, "--timeout", "10s"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "broken") {
		t.Errorf("second reload (refused policy): exit %d, stderr %q", code, errb.String())
	}
	close(firstReplanned) // the first one's re-plan ends after the second's answer
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
