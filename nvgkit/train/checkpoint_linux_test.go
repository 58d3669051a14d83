//go:build linux

package train

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestCheckpointSaveFileTooLargeChild is the child process of TestCheckpointSaveFileTooLarge:
// with RLIMIT_FSIZE lowered to NVG_FSIZE bytes and SIGXFSZ ignored, any write past the
// limit fails with EFBIG — a real OS error, as on a full disk — and the child prints
// Save's error.
func TestCheckpointSaveFileTooLargeChild(t *testing.T) {
	path := os.Getenv("NVG_CKPT_CHILD")
	if path == "" {
		t.Skip("child process of TestCheckpointSaveFileTooLarge")
	}
	limit, err := strconv.ParseUint(os.Getenv("NVG_FSIZE"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	signal.Ignore(syscall.SIGXFSZ)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		t.Fatal(err)
	}
	big := &Checkpoint{Meta: CheckpointMeta{Version: 2, Step: 9}, Tensors: map[string][]float32{"a": make([]float32, 1<<18)}}
	err = big.Save(path)
	fmt.Printf("SAVE-ERROR: %v\n", err)
}

// TestCheckpointSaveFileTooLarge: a checkpoint write that the OS refuses part-way (EFBIG
// from a lowered file size limit, standing in for a full disk) leaves the previous
// checkpoint byte for byte, removes the temporary file, and says the previous checkpoint
// was kept.
func TestCheckpointSaveFileTooLarge(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ckpt")
	old := &Checkpoint{Meta: CheckpointMeta{Version: 2, Step: 3}, Tensors: map[string][]float32{"a": {1, 2, 3}}}
	if err := old.Save(p); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckpointSaveFileTooLargeChild$", "-test.v")
	cmd.Env = append(os.Environ(), "NVG_CKPT_CHILD="+p, "NVG_FSIZE=65536")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var msg string
	for _, line := range strings.Split(string(out), "\n") {
		if m, ok := strings.CutPrefix(line, "SAVE-ERROR: "); ok {
			msg = m
		}
	}
	for _, w := range []string{"write " + p, "file too large", "the previous checkpoint " + p + " was kept intact"} {
		if !strings.Contains(msg, w) {
			t.Errorf("Save's error %q lacks %q\n%s", msg, w, out)
		}
	}
	after, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(after, before) {
		t.Fatalf("previous checkpoint changed: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	if ck, err := LoadCheckpoint(p); err != nil || ck.Meta.Step != 3 {
		t.Errorf("previous checkpoint: %v, %v", ck, err)
	}
	// With no previous checkpoint the error says none was written.
	q := filepath.Join(t.TempDir(), "ckpt")
	cmd = exec.Command(os.Args[0], "-test.run=^TestCheckpointSaveFileTooLargeChild$", "-test.v")
	cmd.Env = append(os.Environ(), "NVG_CKPT_CHILD="+q, "NVG_FSIZE=65536")
	if out, err = cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "no checkpoint was written") {
		t.Errorf("first checkpoint refused: %v\n%s", err, out)
	}
	if exists, _ := statFile(q); exists {
		t.Errorf("%s exists after a failed first save", q)
	}
}
