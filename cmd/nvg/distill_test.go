package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit"
)

func TestDistillUsageErrors(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	os.Mkdir(full, 0o755)
	os.WriteFile(filepath.Join(full, "x"), []byte("x"), 0o644)
	goFile := filepath.Join(runtime.GOROOT(), "src", "sort", "sort.go")
	for _, args := range [][]string{
		{"distill", "--bogus"},
		{"distill", "extra-arg"},
		{"distill", "--steps", "0"},
		{"distill", "--nb", "-1"},
		{"distill", "--t", "0"},
		{"distill", "--k", "65"},
		{"distill", "--k", "0"},
		{"distill", "--nb", "4", "--windows", "6"},
		{"distill", "--lr", "0"},
		{"distill", "--lr", "NaN"},
		{"distill", "--lr", "abc"},
		{"distill", "--warmup", "-1"},
		{"distill", "--eval-every", "-2"},
		{"distill", "--eval-windows", "0"},
		{"distill", "--bpw", "40"},
		{"distill", "--paths", "3"},
		{"distill", "--clip", "-1"},
		{"distill", "--teacher", filepath.Join(dir, "missing")},
		{"distill", "--train-files", filepath.Join(dir, "missing.go"), "--eval-files", goFile},
		{"distill", "--train-files", goFile},                      // without --eval-files
		{"distill", "--train-files", dir, "--eval-files", goFile}, // a directory
		{"distill", "--topk-file", filepath.Join(dir, "no", "such", "dir", "topk.bin")},
		{"distill", "-o", full},                                // not empty
		{"distill", "--resume", filepath.Join(dir, "missing")}, // no run there
		{"distill", "--resume", full},                          // not an output directory
		{"distill", "--resume", full, "--steps", "5"},          // settings come from the run
	} {
		if code := run(args); code != 2 {
			t.Errorf("nvg %v: exit %d, want 2", args, code)
		}
	}
	if _, err := os.Stat("out"); err == nil {
		t.Error("a failed call created the default output directory")
	}
}

// TestDistillSmall runs `nvg distill` on the embedded tiny teacher with two small files and a
// tiny budget, and checks every output.
func TestDistillSmall(t *testing.T) {
	gputest.Open(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	src := filepath.Join(runtime.GOROOT(), "src")
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"distill", "--train-files", filepath.Join(src, "strings", "strings.go"), "--eval-files", filepath.Join(src, "sort", "sort.go"),
		"--paths", "1", "--bpw", "0.5", "--steps", "2", "--nb", "2", "--t", "16", "--k", "8", "--eval-every", "1", "--eval-windows", "2", "-o", out}
	if code := run(args); code != 0 {
		t.Fatalf("nvg %v: exit %d", args, code)
	}
	for _, f := range []string{"student.cmf", "report.json", "distill.json", nvgkit.CheckpointFile, "training.png", "grad_norms.png", "metric_hist.png", "reconstruction.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	rep, err := nvgkit.LoadReport(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Steps != 2 || len(rep.Loss) != 2 || len(rep.Evals) != 3 || !(rep.TeacherPPL > 1 && rep.TeacherPPL < rep.CompressedPPL && rep.DistilledPPL <= rep.CompressedPPL) ||
		!(rep.BitsPerWeight > 0.4 && rep.BitsPerWeight < 0.6) {
		t.Errorf("report %+v", rep)
	}
	m, err := cmf.Open(filepath.Join(out, "student.cmf"))
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	// The finished run resumes to the same end (nothing left to do) and writes the same report.
	if code := run([]string{"distill", "--resume", out}); code != 0 {
		t.Fatalf("--resume of a finished run: exit %d", code)
	}
	again, err := nvgkit.LoadReport(filepath.Join(out, "report.json"))
	if err != nil || again.DistilledPPL != rep.DistilledPPL || again.Steps != 2 {
		t.Errorf("resumed report %+v, %v", again, err)
	}
}
