package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit/train"
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
		{"distill", "--nb", "100000", "--t", "100000"}, // nb·t beyond the 32-bit indexing, refused before any work
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
		{"distill", "--train-files", ",", "--eval-files", goFile}, // a list without files
		{"distill", "--train-files", dir, "--eval-files", goFile}, // a directory holding no text file
		{"distill", "--topk-file", filepath.Join(dir, "no", "such", "dir", "topk.bin")},
		{"distill", "-o", full},                                // not empty
		{"distill", "-o", filepath.Join(full, "x")},            // a file
		{"distill", "--mem-log", filepath.Join(full, "x")},     // exists, not a memory log
		{"distill", "--mem-log", full},                         // a directory
		{"distill", "--resume", filepath.Join(dir, "missing")}, // no run there
		{"distill", "--resume", full},                          // not an output directory
		{"distill", "--resume", full, "--lr", "5"},             // settings come from the run
		{"distill", "--steps", "1000000000000"},                // the windows' top-k could not be held
	} {
		if code := run(args); code != 2 {
			t.Errorf("nvg %v: exit %d, want 2", args, code)
		}
	}
	if _, err := os.Stat("out"); err == nil {
		t.Error("a failed call created the default output directory")
	}
	// Issue 34: a huge step count died with "fatal error: out of memory" after compressing;
	// now it is refused at once, naming the largest that fits: ⌊(2³¹−1) / (64·32) / 4⌋ at
	// the default --t, --k and --nb.
	if _, stderr, code := capture(t, []string{"distill", "--steps", "1000000000000"}); code != 2 || !strings.Contains(stderr, "--steps must be ≤ 262143 with --nb = 4") {
		t.Errorf("distill --steps 10¹²: exit %d, %q; want 2 and the limit 262143", code, stderr)
	}
	// A non-empty -o with no checkpoint: the message does not advise --resume.
	_, stderr, code := capture(t, []string{"distill", "-o", full})
	if want := "holds no checkpoint to resume"; code != 2 || !strings.Contains(stderr, want) || strings.Contains(stderr, "or --resume it") {
		t.Errorf("distill -o onto a non-empty directory without a checkpoint: exit %d, %q; want 2 and %q", code, stderr, want)
	}
}

// TestDistillSmall runs `nvg distill` on the embedded tiny teacher with two small files and a
// tiny budget, with the default quality levers (--init refine and the hidden-state loss, here
// with a streamed teacher), and checks every output.
func TestDistillSmall(t *testing.T) {
	gputest.Open(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	src := filepath.Join(runtime.GOROOT(), "src")
	out := filepath.Join(t.TempDir(), "run")
	// Part of the settings come from a --config file; --steps on the command line overrides it.
	conf := filepath.Join(t.TempDir(), "run.json")
	if err := os.WriteFile(conf, []byte(`{"paths": "1", "config": {"steps": 5, "k": 8, "eval_windows": 2}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"distill", "--train-files", filepath.Join(src, "strings", "strings.go"), "--eval-files", filepath.Join(src, "sort", "sort.go"),
		"--config", conf, "--bpw", "0.5", "--steps", "2", "--nb", "2", "--t", "16", "--eval-every", "1", "-o", out,
		"--stream-teacher", "--mem-log", filepath.Join(out + "-mem.csv"), "--mem-log-every", "1"}
	if code := run(args); code != 0 {
		t.Fatalf("nvg %v: exit %d", args, code)
	}
	// The memory log: a header and one sample before the first step and after each.
	samples, err := train.ReadMemLog(out + "-mem.csv")
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(out + "-mem.csv"); !strings.HasPrefix(string(raw), train.MemLogHeader+"\n") || len(samples) != 3 ||
		samples[0].Step != 0 || samples[2].Step != 2 || samples[2].GPUCurrent == 0 || !(samples[2].TokensPerSec > 0) {
		t.Errorf("memory log %q: %+v", raw, samples)
	}
	// nvg compress with the run's settings (distill's default --init refine, calibrated on
	// the same training text) writes the student distill trained from (the same seed and
	// float64 products everywhere), byte for byte.
	same := filepath.Join(t.TempDir(), "s.cmf")
	var code int
	captureStdout(t, func() {
		code = run([]string{"compress", "--bpw", "0.5", "--paths", "1", "--init", "refine", "--train-files", filepath.Join(src, "strings", "strings.go"), "-o", same})
	})
	if code != 0 {
		t.Errorf("nvg compress: exit %d", code)
	} else if a, err1 := os.ReadFile(same); err1 != nil {
		t.Error(err1)
	} else if b, err2 := os.ReadFile(filepath.Join(out, "compressed.cmf")); err2 != nil || !bytes.Equal(a, b) {
		t.Errorf("nvg compress's default student (%d bytes) is not distill's compressed.cmf (%d bytes, %v)", len(a), len(b), err2)
	}
	png := filepath.Join(t.TempDir(), "mem.png")
	if code := run([]string{"plot-mem", out + "-mem.csv", png}); code != 0 {
		t.Errorf("plot-mem: exit %d", code)
	} else if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Errorf("plot-mem wrote no image: %v", err)
	}
	for _, f := range []string{"student.cmf", "report.json", "distill.json", train.CheckpointName(2), "compressed.cmf", "compression.json", "teacher-topk.bin", "training.png", "grad_norms.png", "metric_hist.png", "reconstruction.png", train.MetricsFile} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	rep, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Steps != 2 || len(rep.Loss) != 2 || len(rep.Evals) != 3 || !(rep.TeacherPPL > 1 && rep.TeacherPPL < rep.CompressedPPL && rep.DistilledPPL <= rep.CompressedPPL) ||
		!(rep.BitsPerWeight > 0.4 && rep.BitsPerWeight < 0.6) {
		t.Errorf("report %+v", rep)
	}
	// Provenance: the build (this checkout's commit), the adapter, its tensor cores, the
	// compression products.
	head := gitHead(t)
	if p := rep.Provenance; p == nil || p.Commit != head || p.CommitSource == "" || p.GoVersion != runtime.Version() || p.NVGVersion == "" ||
		p.Adapter == "" || p.Backend == "" || p.Driver == "" || p.CompressProducts != "cpu-f64" ||
		!strings.HasPrefix(p.TensorCores, "on (") && !strings.HasPrefix(p.TensorCores, "off: ") {
		t.Errorf("report provenance %+v, want commit %s", p, head)
	}
	var settings train.RunFile
	if b, err := os.ReadFile(filepath.Join(out, train.RunFileName)); err != nil || json.Unmarshal(b, &settings) != nil {
		t.Errorf("distill.json: %v", err)
	} else if p := settings.Provenance; p == nil || *p != *rep.Provenance {
		t.Errorf("distill.json provenance %+v, report's %+v", p, rep.Provenance)
	}
	// distill.json holds the effective settings: the file's, the flags', the defaults.
	if c := settings.Train; settings.Paths != "1" || settings.BitsPerWeight != 0.5 || c.Steps != 2 || c.K != 8 || c.EvalWindows != 2 || c.NB != 2 || c.T != 16 ||
		c.EvalEvery != 1 || c.LR != 0.05 || c.Warmup != 3 || c.ClipNorm != 1 || c.MinLRFrac != 0.1 || c.OutDir != out ||
		settings.Init != "refine" || c.HiddenLoss != "mse" || c.HiddenLayers != "every:4" {
		t.Errorf("distill.json settings %+v", settings)
	}
	m, err := cmf.Open(filepath.Join(out, "student.cmf"))
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	// Resuming the finished run says it is complete, exits 0 and redoes nothing (the
	// student is not exported again).
	before, _ := os.Stat(filepath.Join(out, "student.cmf"))
	if code := run([]string{"distill", "--resume", out}); code != 0 {
		t.Fatalf("--resume of a finished run: exit %d", code)
	}
	if after, err := os.Stat(filepath.Join(out, "student.cmf")); err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("--resume of a finished run rewrote student.cmf (%v)", err)
	}
	again, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil || again.DistilledPPL != rep.DistilledPPL || again.Steps != 2 {
		t.Errorf("resumed report %+v, %v", again, err)
	}
}

// TestDistillChild is the body of the child process of TestDistillInterruptResume.
func TestDistillChild(t *testing.T) {
	if os.Getenv("NVG_DISTILL_CHILD") != "1" {
		t.Skip("child process of TestDistillInterruptResume")
	}
	os.Exit(run(strings.Split(os.Getenv("NVG_DISTILL_ARGS"), "\x1f")))
}

// SIGINT (exit 130) or SIGTERM (exit 143, as a batch scheduler sends) during a run writes
// a checkpoint; --resume continues from it to the end with the losses it recorded.
func TestDistillInterruptResume(t *testing.T) {
	gputest.Open(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { distillInterruptResume(t, sig) })
	}
}

func distillInterruptResume(t *testing.T, sig syscall.Signal) {
	cache := t.TempDir()
	t.Setenv("NVG_CACHE", cache)
	out, args := goDistill(t,
		"--paths", "1", "--bpw", "0.5", "--steps", "6", "--nb", "2", "--t", "8", "--k", "4", "--eval-every", "1", "--eval-windows", "1")
	cmd := exec.Command(os.Args[0], "-test.run=^TestDistillChild$")
	cmd.Env = append(os.Environ(), "NVG_DISTILL_CHILD=1", "NVG_DISTILL_ARGS="+strings.Join(args, "\x1f"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for !train.HasCheckpoint(out) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 128+int(sig) {
		t.Fatalf("interrupted run: %v, want exit status %d\n%s", err, 128+int(sig), stderr.String())
	}
	if !strings.Contains(stderr.String(), "--resume "+out) {
		t.Fatalf("no resume hint in:\n%s", stderr.String())
	}
	ck, _, err := train.LatestCheckpoint(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Meta.Step < 1 || ck.Meta.Step >= 6 {
		t.Fatalf("checkpoint at step %d, want 1…5 (the test sends %v after the first)", ck.Meta.Step, sig)
	}
	if code := run([]string{"distill", "--resume", out}); code != 0 {
		t.Fatalf("--resume: exit %d", code)
	}
	rep, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Steps != 6 || len(rep.Loss) != 6 || rep.Interrupted || len(rep.Evals) != 7 {
		t.Errorf("resumed report: steps %d, %d losses, %d evals, interrupted %v", rep.Steps, len(rep.Loss), len(rep.Evals), rep.Interrupted)
	}
	for i, l := range rep.Loss[:ck.Meta.Step] {
		if l != ck.Meta.Loss[i] {
			t.Errorf("loss %d: %g in the checkpoint, %g in the report", i+1, ck.Meta.Loss[i], l)
		}
	}
	// metrics.jsonl holds every step once, the interrupted session's and the resumed one's.
	recs, _, err := train.ReadMetrics(filepath.Join(out, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	steps, loss, evalSteps, _, _ := train.TrainingSeries(recs)
	if len(steps) != 6 || len(evalSteps) != 7 {
		t.Fatalf("metrics.jsonl: steps %v, evals at %v; want 1…6 and 0…6", steps, evalSteps)
	}
	for i := range steps {
		if steps[i] != i+1 || loss[i] != rep.Loss[i] {
			t.Errorf("metrics.jsonl step record %d: step %d loss %g, want step %d loss %g", i, steps[i], loss[i], i+1, rep.Loss[i])
		}
	}
}

// SIGINT before training starts (here: as compression begins) stops the run there, says
// nothing was trained, writes no checkpoint and exits 130.
func TestDistillInterruptBeforeTraining(t *testing.T) {
	t.Setenv("NVG_CACHE", t.TempDir())
	out, args := goDistill(t,
		"--paths", "1", "--bpw", "0.5", "--steps", "2", "--nb", "2", "--t", "8", "--k", "4", "--eval-windows", "1")
	var phases []string
	distillPhaseHook = func(phase string) {
		phases = append(phases, phase)
		if phase == "compress" {
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				p.Signal(os.Interrupt)
			}
			time.Sleep(300 * time.Millisecond) // the signal goroutine cancels the run
		}
	}
	defer func() { distillPhaseHook = nil }()
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = errf
	code := run(args)
	os.Stderr = stderr
	msg, _ := os.ReadFile(errf.Name())
	errf.Close()
	if code != 130 {
		t.Fatalf("exit %d, want 130\n%s", code, msg)
	}
	if !strings.Contains(string(msg), "nothing was trained") {
		t.Errorf("no 'nothing was trained' in:\n%s", msg)
	}
	if last := phases[len(phases)-1]; last != "compress" && last != "compressed" {
		t.Errorf("phases %v: want a stop at compression", phases)
	}
	if exists(out) {
		t.Errorf("%s left behind by a run interrupted before training", out)
	}
}

// A distill that fails before its first checkpoint (here: a truncated teacher) removes the
// output directory it made, so that a retry with the same -o is not refused as "not empty".
func TestDistillFailureLeavesNoOutput(t *testing.T) {
	dir := t.TempDir()
	teacher := filepath.Join(dir, "teacher.safetensors")
	orig, err := os.ReadFile("../../cmf/tinyteacher/model/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(teacher, orig[:5000], 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run")
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	for _, o := range []string{out, empty} {
		for try := 1; try <= 2; try++ {
			stdout, stderr, code := capture(t, []string{"distill", "--teacher", teacher, "--steps", "1", "-o", o})
			if code != 1 {
				t.Errorf("-o %s, try %d: exit %d, want 1 (a broken teacher)\n%s", o, try, code, stderr)
			}
			// Issue 34: it said "output directory: …" before failing, and none was left.
			if strings.Contains(stdout+stderr, "output directory") {
				t.Errorf("-o %s, try %d: a failed run names an output directory it does not leave:\n%s%s", o, try, stdout, stderr)
			}
		}
	}
	if exists(out) {
		t.Errorf("%s left behind", out)
	}
	if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
		t.Errorf("%s: %v, %d entries, want it kept and empty", empty, err, len(ents))
	}
}

// TestDistillResumeReuse: --resume checks the checkpoint before any work and reuses the
// run's compressed student and the teacher's top-k file. A 4-step run, cut back to its
// step-2 checkpoint, resumes without compression or teacher pass to the same losses bit for
// bit; --steps 6 extends the finished run (the first 4 losses kept); a truncated latest
// checkpoint falls back to the one before with a warning; with no valid checkpoint left the
// resume fails before any phase of the run (no compression, no GPU).
func TestDistillResumeReuse(t *testing.T) {
	gputest.Open(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	out, args := goDistill(t,
		"--paths", "1", "--bpw", "0.5", "--steps", "4", "--nb", "2", "--t", "8", "--k", "4", "--eval-every", "2", "--eval-windows", "1",
		"--checkpoint-every", "1", "--keep", "10")
	if _, stderr, code := capture(t, args); code != 0 {
		t.Fatalf("nvg %v: exit %d\n%s", args, code, stderr)
	}
	full, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	distillPhaseHook = func(p string) { phases = append(phases, p) }
	defer func() { distillPhaseHook = nil }()
	resume := func(extra ...string) (string, int) {
		phases = nil
		_, stderr, code := capture(t, append([]string{"distill", "--resume", out}, extra...))
		return stderr, code
	}
	// A checkpoint of a run with other settings in the directory (issue 34: one of another
	// --bpw was accepted, and the mismatch showed after compressing, as a digest error): the
	// resume is refused before any phase, naming the flag and both values.
	rf := filepath.Join(out, train.RunFileName)
	orig, err := os.ReadFile(rf)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ old, new, want string }{
		{`"bits_per_weight_target": 0.5`, `"bits_per_weight_target": 1`, "was trained with --bpw 0.5, but " + rf + " has bits_per_weight_target = 1"},
		{`"seed": 1`, `"seed": 2`, "was trained with --seed 1, but " + rf + " has config.seed = 2"},
		{`"paths": "1"`, `"paths": "2"`, `was trained with --paths "1"`},
	} {
		changed := strings.ReplaceAll(string(orig), c.old, c.new)
		if changed == string(orig) {
			t.Fatalf("%s holds no %s", rf, c.old)
		}
		os.WriteFile(rf, []byte(changed), 0o644)
		if stderr, code := resume(); code != 2 || len(phases) > 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("--resume with %s in %s: exit %d, phases %v\n%s\nwant exit 2, no phase, %q", c.new, rf, code, phases, stderr, c.want)
		}
	}
	os.WriteFile(rf, orig, 0o644)
	// Back to the step-2 checkpoint, as if the run had been killed after step 2.
	for _, f := range []string{train.CheckpointName(3), train.CheckpointName(4), "report.json", "student.cmf"} {
		if err := os.Remove(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	stderr, code := resume()
	if code != 0 {
		t.Fatalf("--resume: exit %d\n%s", code, stderr)
	}
	if slices.Contains(phases, "compress") || !slices.Contains(phases, "reuse-student") {
		t.Errorf("phases %v: the compressed student was not reused", phases)
	}
	if !strings.Contains(stderr, "teacher top-k: 8 windows from "+filepath.Join(out, "teacher-topk.bin")) || strings.Contains(stderr, "teacher pass") {
		t.Errorf("the teacher's top-k was not reused:\n%s", stderr)
	}
	resumed, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(resumed.Loss) != 4 || resumed.DistilledPPL != full.DistilledPPL {
		t.Fatalf("resumed report %+v, uninterrupted %+v", resumed, full)
	}
	for i := range full.Loss {
		if full.Loss[i] != resumed.Loss[i] {
			t.Errorf("step %d: loss %.17g uninterrupted, %.17g resumed", i+1, full.Loss[i], resumed.Loss[i])
		}
	}
	// Extending the finished run; fewer steps than planned is a usage error.
	if stderr, code := resume("--steps", "6"); code != 0 || !strings.Contains(stderr, "extending the run to 6 steps") {
		t.Fatalf("--resume --steps 6: exit %d\n%s", code, stderr)
	}
	ext, err := train.LoadReport(filepath.Join(out, "report.json"))
	if err != nil || ext.Steps != 6 || len(ext.Loss) != 6 || ext.Config.Steps != 6 || ext.Config.ScheduleSteps != 4 {
		t.Fatalf("extended report %+v, %v", ext, err)
	}
	for i := range full.Loss {
		if full.Loss[i] != ext.Loss[i] {
			t.Errorf("step %d: loss %.17g before, %.17g after extending", i+1, full.Loss[i], ext.Loss[i])
		}
	}
	if _, code := resume("--steps", "5"); code != 2 {
		t.Errorf("--resume --steps 5 of a 6-step run: exit %d, want 2", code)
	}
	// A truncated latest checkpoint: a warning, and the run redoes step 6 from step 5.
	latest := filepath.Join(out, train.CheckpointName(6))
	raw, err := os.ReadFile(latest)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(latest, raw[:len(raw)/2], 0o644)
	os.Remove(filepath.Join(out, "report.json"))
	if stderr, code := resume(); code != 0 || !strings.Contains(stderr, "warning: ") || !strings.Contains(stderr, latest) {
		t.Fatalf("--resume with a truncated latest checkpoint: exit %d\n%s", code, stderr)
	}
	if again, err := train.LoadReport(filepath.Join(out, "report.json")); err != nil || len(again.Loss) != 6 || again.Loss[5] != ext.Loss[5] {
		t.Errorf("after falling back: %+v, %v (want step 6's loss %g)", again, err, ext.Loss[5])
	}
	// Every checkpoint truncated: refused before any phase (no compression, no teacher).
	ps, _ := train.CheckpointPaths(out)
	for _, p := range ps {
		raw, _ := os.ReadFile(p)
		os.WriteFile(p, raw[:len(raw)-1], 0o644)
	}
	stderr, code = resume()
	if code == 0 || len(phases) != 0 || !strings.Contains(stderr, "no valid checkpoint in "+out) {
		t.Errorf("--resume with no valid checkpoint: exit %d, phases %v\n%s", code, phases, stderr)
	}
}

// plainRun are the flags that turn nvg distill's quality defaults (the refined
// initialisation, ~45 s of float64 host work per run on 2 cores, and the hidden-state loss)
// back to the Dual-SVID start and the KL alone, for the tests that are not about them; a
// later --init or --hidden-loss overrides them. TestDistillSmall keeps the defaults (with a
// streamed teacher), and TestDistillRefineFinish and the hidden-state tests ask for them.
var plainRun = []string{"--init", "dual-svid", "--hidden-loss", "none"}

// goDistill returns a new output directory and the arguments of an nvg distill run into it
// on two files of the Go source tree (strings.go to train on, sort.go held out) with
// plainRun and the flags extra.
func goDistill(t *testing.T, extra ...string) (out string, args []string) {
	src := filepath.Join(runtime.GOROOT(), "src")
	out = filepath.Join(t.TempDir(), "run")
	args = []string{"distill", "--train-files", filepath.Join(src, "strings", "strings.go"), "--eval-files", filepath.Join(src, "sort", "sort.go"), "-o", out}
	return out, append(append(args, plainRun...), extra...)
}
