package looptest

import (
	"os"
	"testing"
)

func TestIntegrationAddBindRemove(t *testing.T) {
	Require(t)
	l := Add(t, 7190)
	l.Bind(t, 1<<20)
	b, err := os.ReadFile("/sys/block/loop7190/size")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "2048\n" {
		t.Fatalf("size = %q, want 2048 sectors", b)
	}
	l.Remove(t)
	if _, err := os.Stat("/sys/block/loop7190"); !os.IsNotExist(err) {
		t.Fatalf("loop7190 still present after Remove: %v", err)
	}
}
