package testdb

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestReapOrphans: a directory left by a test binary that died is removed;
// one whose owner still runs is left alone.
func TestReapOrphans(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan, err := os.MkdirTemp("", "skiplock-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(orphan)
	live, err := os.MkdirTemp("", "skiplock-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	for dir, pid := range map[string]int{orphan: dead.Process.Pid, live: os.Getpid()} {
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reapOrphans()
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("the dead owner's directory is still there (%v)", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live owner's directory was removed: %v", err)
	}
}
