package uevent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// udevd's database entry for a disk is read the safe way: a FIFO in its
// place gives no properties at once, where reading it waited for a writer
// and held up the disk's pass.
func TestUdevPropertiesRefusesAFIFO(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "b8:0"), []byte("S:disk/by-id/x\nE:ID_MODEL=X\nE:ID_BUS=ata\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p := UdevProperties(dir, "8:0"); p["ID_MODEL"] != "X" || p["ID_BUS"] != "ata" || len(p) != 2 {
		t.Errorf("UdevProperties = %v, want ID_MODEL and ID_BUS", p)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "b8:16"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan map[string]string, 1)
	go func() { done <- UdevProperties(dir, "8:16") }()
	select {
	case p := <-done:
		if p != nil {
			t.Errorf("UdevProperties of a FIFO = %v, want none", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("UdevProperties blocked on a FIFO")
	}
}
