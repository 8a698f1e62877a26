package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/statefile"
)

// A failed reload is the last error until a valid one replaces the policy
// it was about; the state keeps the last KeptReloads, numbered on.
func TestReloadedKeepsAndClears(t *testing.T) {
	t.Parallel()
	var r Report
	r.Reloaded(false, []string{"rule 1: bad"}, []string{"a"})
	if r.LastError == nil || !strings.Contains(r.LastError.Message, "rule 1: bad") {
		t.Fatalf("failed reload: last error %+v", r.LastError)
	}
	if last := r.LastReload(); last.OK || !last.Done || last.Seq != 1 {
		t.Errorf("failed reload recorded as %+v", last)
	}
	r.Reloaded(true, nil, nil)
	if r.LastError != nil {
		t.Errorf("a valid reload left the failed one's error: %+v", r.LastError)
	}
	if last := r.LastReload(); !last.OK || last.Done {
		t.Errorf("valid reload, not yet re-planned, recorded as %+v", last)
	}
	r.Replanned()
	if !r.LastReload().Done {
		t.Error("re-planned reload not done")
	}
	for range KeptReloads + 3 {
		r.Reloaded(true, nil, nil)
	}
	if len(r.Reloads) != KeptReloads || r.LastReload().Seq != KeptReloads+5 {
		t.Errorf("%d reloads kept, last seq %d; want %d, %d", len(r.Reloads), r.LastReload().Seq, KeptReloads, KeptReloads+5)
	}
}

// A failure to save the originals is the last error until a save works;
// an error of another kind since stays.
func TestPersisted(t *testing.T) {
	t.Parallel()
	var r Report
	r.Persisted(errors.New("disk full"))
	if r.Persistence == nil || r.LastError != r.Persistence {
		t.Fatalf("save failure: persistence %+v, last error %+v", r.Persistence, r.LastError)
	}
	r.Persisted(nil)
	if r.Persistence != nil || r.LastError != nil {
		t.Errorf("after a save: persistence %+v, last error %+v", r.Persistence, r.LastError)
	}
	r.Persisted(errors.New("disk full"))
	other := &statefile.Problem{Message: "other"}
	r.LastError = other
	r.Persisted(nil)
	if r.LastError != other {
		t.Errorf("a save cleared another error: %+v", r.LastError)
	}
}

// The same failure on a disk's next pass is not news: its time stays, and
// it does not become the daemon's last error again.
func TestSettleDiskRepeatedFailure(t *testing.T) {
	t.Parallel()
	var r Report
	var st statefile.DiskState
	r.SettleDisk("vda", statefile.DiskState{}, &st, []string{"scheduler: EINVAL"})
	first := st.LastError
	if first == nil || r.LastError == nil || r.LastError.Device != "vda" {
		t.Fatalf("first failure: disk %+v, daemon %+v", first, r.LastError)
	}
	r.LastError = nil
	var again statefile.DiskState
	r.SettleDisk("vda", st, &again, []string{"scheduler: EINVAL"})
	if again.LastError != first || r.LastError != nil {
		t.Errorf("repeated failure: disk %+v (want the first %+v), daemon %+v (want none)", again.LastError, first, r.LastError)
	}
	var ok statefile.DiskState
	r.SettleDisk("vda", again, &ok, nil)
	if ok.LastError != nil {
		t.Errorf("a pass without failure kept %+v", ok.LastError)
	}
}
