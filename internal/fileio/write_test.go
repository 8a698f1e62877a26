package fileio

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A reader never sees half a file, and no temporary file is left.
func TestWriteReplacesWhole(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.json")
	big := func(i int) []byte {
		st := struct {
			PID   int
			Disks map[string]string
		}{PID: i, Disks: map[string]string{}}
		for n := range 500 {
			st.Disks[fmt.Sprintf("loop%d", n)] = "loop, rule r"
		}
		b, _ := json.Marshal(st)
		return b
	}
	if err := Write(path, big(0)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			b, err := os.ReadFile(path)
			var st map[string]any
			if err == nil {
				err = json.Unmarshal(b, &st)
			}
			if err != nil {
				done <- fmt.Errorf("a reader saw a partial file: %w", err)
				return
			}
		}
	}()
	for i := range 200 {
		if err := Write(path, big(i)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}
