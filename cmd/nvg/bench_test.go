package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/bench"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestBenchTiny runs `nvg bench` on the tiny geometry (lavapipe in CI) and checks the JSON:
// positive throughputs, peaks at least the weights, profiles naming real kernels, a finite
// loss, and the model counts of the tiny geometry.
func TestBenchTiny(t *testing.T) {
	d := gputest.Open(t) // skips (or fails with NVG_REQUIRE_GPU=1) without an adapter
	_ = d
	dir := t.TempDir()
	path := filepath.Join(dir, "bench.json")
	if code := run([]string{"bench", "--model", "tiny", "--nb", "2", "--t", "64", "--steps", "1", "--reps", "1", "--warmup", "0", "--json", path,
		"--cpuprofile", filepath.Join(dir, "cpu.prof")}); code != 0 {
		t.Fatalf("nvg bench: exit %d", code)
	}
	rep := readJSON[bench.Report](t, path)
	if rep.Device == "" || rep.Date == "" || !strings.Contains(rep.Command, "--model tiny") || len(rep.Results) != 1 {
		t.Fatalf("report header %+v", rep)
	}
	if !strings.HasPrefix(rep.Build, "nvg ") || !strings.Contains(rep.Build, rep.GoVersion) {
		t.Errorf("build %q: want version.Info's string with the Go version %s", rep.Build, rep.GoVersion)
	}
	// --cpuprofile: a gzip-compressed pprof protobuf named after the geometry.
	if prof, err := os.ReadFile(filepath.Join(dir, "cpu-tiny.prof")); err != nil || len(prof) < 20 || prof[0] != 0x1f || prof[1] != 0x8b {
		t.Errorf("CPU profile cpu-tiny.prof: %d bytes, err %v; want a gzip-compressed profile", len(prof), err)
	}
	r := rep.Results[0]
	if r.Error != "" {
		t.Fatalf("tiny failed: %s", r.Error)
	}
	if r.Geom != "tiny" || r.Tokens != 128 || r.TeacherMode != "resident" || r.Teacher == nil || r.Student == nil {
		t.Fatalf("result %+v", r)
	}
	if tc := d.TensorCores().String(); rep.TensorCores != tc || r.TensorCores != tc {
		t.Errorf("tensor cores: report %q, result %q; the device's %q (--tensor-cores auto)", rep.TensorCores, r.TensorCores, tc)
	}
	// The tiny geometry: 8192·256 embedding + 256 final norm + 8 layers (Python count).
	if r.Params != 8936728 {
		t.Errorf("params %d, want 8936728", r.Params)
	}
	if !(r.BitsPerWeight > 1 && r.BitsPerWeight < 2) { // the 128-rank floor on 256-wide projections
		t.Errorf("bits per weight %g", r.BitsPerWeight)
	}
	if math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) || !(r.Loss > 0) {
		t.Errorf("loss %g", r.Loss)
	}
	for name, ph := range map[string]*bench.Phase{"teacher": r.Teacher, "student": r.Student} {
		if !(ph.TokS > 0) || len(ph.Seconds) != 1 || ph.WeightBytes == 0 || ph.PeakBytes < ph.WeightBytes {
			t.Errorf("%s: tok/s %g, runs %d, peak %d, weights %d", name, ph.TokS, len(ph.Seconds), ph.PeakBytes, ph.WeightBytes)
		}
	}
	has := func(rows []bench.Kernel, names ...string) {
		t.Helper()
		seen := map[string]bool{}
		var share float64
		for _, k := range rows {
			seen[k.Name] = k.Calls > 0 && k.TotalMS > 0
			share += k.Share
		}
		for _, n := range names {
			if !seen[n] {
				t.Errorf("profile lacks %s: %v", n, rows)
			}
		}
		if math.Abs(share-100) > 0.1 {
			t.Errorf("shares sum to %g %%", share)
		}
	}
	if rep.CPU || d.Info().Timestamps {
		// The attention and delta-rule kernels gpu picks: the cooperative-matrix forms where
		// tensor cores are on, the lane-blocked forms on CPU adapters (a probed subgroup
		// size), else the tiled attention and, at nb·hv ≤ 64, the chunked delta rule.
		attn, gdr, attnBack, gdrBack := "Attention", "GatedDeltaRuleChunked", "AttentionBackward.dkv", "GatedDeltaRuleChunkedBackward"
		switch {
		case d.TensorCores().On: // the cooperative-matrix forms, on any adapter
			// The backward reads the forward its layer's recompute saved
			// (gpu.GatedDeltaRuleAutoSave): its own inter-chunk forward must not run.
			attn, gdr, attnBack, gdrBack = "AttentionCoopmat", "GatedDeltaRuleChunkedCoopmat", "AttentionBackwardCoopmat.dkv", "GatedDeltaRuleChunkedBackwardCoopmat.dhu"
			for _, k := range r.Student.Profile {
				if k.Name == "GatedDeltaRuleChunkedBackwardCoopmat" || k.Name == "GatedDeltaRuleChunkedBackwardCoopmat.intra" {
					t.Errorf("the delta rule's backward ran its own forward (%s, %d calls): the recompute's saved one went unused", k.Name, k.Calls)
				}
			}
		case d.Info().SubgroupSize > 0:
			attn, gdr, attnBack, gdrBack = "AttentionLanes", "GatedDeltaRuleLanes", "AttentionBackwardLanes.dkv", "GatedDeltaRuleBackwardLanes"
		}
		has(r.Teacher.Profile, "Linear", "LogitsTopK.logits", "LogitsTopK.merge", attn, gdr, "Embedding")
		has(r.Student.Profile, "BLRForward.y", "KLLossBackward.logits", attnBack, gdrBack, "MultiTensorAdam.update")
	}
}

// TestBenchFlags: bad flags are usage errors (exit 2) before any device is opened.
func TestBenchFlags(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"bench", "--model", "7B"},
		{"bench", "--teacher", "sometimes"},
		{"bench", "--k", "0"},
		{"bench", "--k", "65"},
		{"bench", "--nb", "0"},
		{"bench", "--steps", "0"},
		{"bench", "--peak-tflops", "0"},
		{"bench", "extra"},
		{"bench", "--report", filepath.Join(dir, "x.json"), "--model", "tiny"},
		{"bench", "--report", filepath.Join(dir, "x.json"), "--format", "html"},
		{"bench", "--peer", filepath.Join(dir, "p.txt")},
		{"bench", "--cpu", filepath.Join(dir, "c.json"), "--format", "text"},
		{"bench", "--model", "tiny,tiny"},
		{"bench", "--tensor-cores", "sometimes"},
		{"bench", "--tensor-cores", "on,on"},
		{"bench", "--report", filepath.Join(dir, "x.json"), "--tensor-cores", "off"},
		{"bench", "--report", filepath.Join(dir, "x.json"), "--peak-gbps", "3350"}, // the run's JSON holds the ceilings
		{"bench", "--peak-tensor-tflops", "-1"},
		{"bench", "--cpuprofile", dir},                                       // a directory
		{"bench", "--cpuprofile", filepath.Join(dir, "missing", "cpu.prof")}, // no such directory
	} {
		if code := run(args); code != 2 {
			t.Errorf("nvg %v: exit %d, want 2", args, code)
		}
	}
	if err := (&bench.Options{Models: []string{"tiny", "13B"}, NB: 1, T: 1, K: 1, Steps: 1, Reps: 1, Teacher: "auto", PeakTF: 1, PeakGB: 1, Clip: 1}).Validate(); err == nil ||
		!strings.Contains(err.Error(), `"13B"`) || !strings.Contains(err.Error(), "27B") {
		t.Errorf("unknown geometry error: %v", err)
	}
	if code := run([]string{"bench", "--report", filepath.Join(dir, "missing.json")}); code != 1 {
		t.Errorf("missing report: exit %d, want 1", code)
	}
}

// TestBenchDeadline: a deadline that has passed before the first geometry skips it (its
// row says so in the JSON) and the command fails, as every geometry did.
func TestBenchDeadline(t *testing.T) {
	gputest.Open(t)
	path := filepath.Join(t.TempDir(), "bench.json")
	if code := run([]string{"bench", "--model", "tiny", "--deadline", "1ns", "--json", path}); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	rep := readJSON[bench.Report](t, path)
	if len(rep.Results) != 1 || !strings.Contains(rep.Results[0].Error, "deadline") {
		t.Errorf("results %+v", rep.Results)
	}
	if code := run([]string{"bench", "--deadline", "-1s"}); code != 2 {
		t.Errorf("negative deadline: exit %d, want 2", code)
	}
}

// TestBenchReportFlags: --before without --report is a usage error; a missing --before file
// fails (exit 1).
func TestBenchReportFlags(t *testing.T) {
	dir := t.TempDir()
	js, old := filepath.Join(dir, "nvg.json"), filepath.Join(dir, "old.json")
	for _, p := range []string{js, old} {
		if err := os.WriteFile(p, []byte(`{"device": "d", "results": [{"geom": "0.8B", "nb": 8, "t": 512, "k": 32, "tokens": 4096, "teacher_mode": "resident"}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"bench", "--before", old}, {"bench", "--cpu", js, "--before", old}} {
		if code := run(args); code != 2 {
			t.Errorf("nvg %v: exit %d, want 2", args, code)
		}
	}
	if code := run([]string{"bench", "--report", js, "--before", filepath.Join(dir, "missing.json")}); code != 1 {
		t.Errorf("missing before file: exit %d, want 1", code)
	}
}

// TestBenchTensorCores: --tensor-cores on,off measures the geometry on both GEMM paths in one
// run, each result saying its path, both losses finite and close (f16 operands move the
// loss by far less than 1 %); where the device has no tensor cores, --tensor-cores on is
// refused before anything is measured, naming why, and off still measures.
func TestBenchTensorCores(t *testing.T) {
	d := gputest.Open(t)
	tc := d.TensorCores()
	path := filepath.Join(t.TempDir(), "bench.json")
	args := []string{"bench", "--model", "tiny", "--nb", "1", "--t", "16", "--steps", "1", "--reps", "1", "--warmup", "0", "--profile=false", "--json", path}
	if !tc.Available {
		_, stderr, code := capture(t, append(args, "--tensor-cores", "on"))
		if code != 1 || !strings.Contains(stderr, "--tensor-cores on") || !strings.Contains(stderr, tc.Reason) {
			t.Errorf("--tensor-cores on without tensor cores: exit %d, stderr %q; want 1 and the reason %q", code, stderr, tc.Reason)
		}
		if code := run(append(args, "--tensor-cores", "off")); code != 0 {
			t.Fatalf("--tensor-cores off: exit %d", code)
		}
		rep := readJSON[bench.Report](t, path)
		if len(rep.Results) != 1 || rep.Results[0].TensorCores != tc.String() || rep.Results[0].Error != "" {
			t.Errorf("--tensor-cores off: results %+v", rep.Results)
		}
		t.Skipf("no tensor cores on %s (the A/B is not tested here): %s", d.Info().Name, tc.Reason)
	}
	if code := run(append(args, "--tensor-cores", "on,off")); code != 0 {
		t.Fatalf("--tensor-cores on,off: exit %d", code)
	}
	rep := readJSON[bench.Report](t, path)
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want 2", len(rep.Results))
	}
	on, off := rep.Results[0], rep.Results[1]
	want := tc
	want.On, want.Reason = true, ""
	if on.TensorCores != want.String() || off.TensorCores != "off: forced off (nvg bench --tensor-cores off)" || on.Error != "" || off.Error != "" {
		t.Fatalf("results: on %q (%s), off %q (%s)", on.TensorCores, on.Error, off.TensorCores, off.Error)
	}
	if !(on.Loss > 0) || !(off.Loss > 0) || math.Abs(on.Loss-off.Loss) > 1e-2*off.Loss {
		t.Errorf("losses: on %v, off %v", on.Loss, off.Loss)
	}
}
