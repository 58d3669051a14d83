package bench_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/bench"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/nvgkit"
)

// TestSyntheticConfigs: the geometries of torch_baseline.py's G/cfg_of, parameter counts and
// BLR ranks from independent arithmetic (Python, by hand), and unknown names rejected.
func TestSyntheticConfigs(t *testing.T) {
	want := map[string]struct {
		h, i, l, nh, nkv, hk, hv int
		tied                     bool
		params                   int64 // Python: embedding (+ head) + layers + final norm
	}{
		"0.8B": {1024, 3584, 24, 8, 2, 16, 16, true, 752393024},
		"4B":   {2560, 9216, 32, 16, 4, 16, 32, true, 4205751296},
		"9B":   {4096, 12288, 32, 16, 4, 16, 32, false, 8953803264},
		"27B":  {5120, 17408, 64, 24, 4, 16, 48, false, 26895998464},
	}
	for name, w := range want {
		c, err := bench.Config(name)
		if err != nil {
			t.Fatal(err)
		}
		if c.HiddenSize != w.h || c.IntermediateSize != w.i || c.NumHiddenLayers != w.l || c.NumAttentionHeads != w.nh ||
			c.NumKeyValueHeads != w.nkv || c.LinearNumKeyHeads != w.hk || c.LinearNumValueHeads != w.hv || c.TieWordEmbeddings != w.tied ||
			c.VocabSize != 248320 || c.HeadDim != 256 || c.LinearKeyHeadDim != 128 || c.LinearValueHeadDim != 128 || c.LinearConvKernelDim != 4 ||
			c.PartialRotaryFactor != 0.25 || c.RopeTheta != 1e7 || c.RMSNormEps != 1e-6 {
			t.Errorf("%s: config %+v", name, c)
		}
		for i, lt := range c.LayerTypes {
			if (lt == arch.FullAttention) != ((i+1)%4 == 0) {
				t.Errorf("%s: layer %d is %s", name, i, lt)
			}
		}
		p, err := bench.Memory(c, nvgkit.Teacher, 1, 64, 32, false)
		if err != nil {
			t.Fatal(err)
		}
		if p.Params != w.params {
			t.Errorf("%s: %d parameters, want %d", name, p.Params, w.params)
		}
	}
	// rank_for by hand: (m·n − 32(m+n)) / (2(m+n+16)), floored to a multiple of 128, ≥ 128.
	for _, c := range []struct{ m, n, want int }{
		{3584, 1024, 256},   // (3670016 − 147456)/9248 = 380.9
		{5120, 17408, 1920}, // (89128960 − 720896)/45088 = 1960.8
		{512, 1024, 128},    // 153.0
		{128, 256, 128},     // 25.6 → the floor of 128
	} {
		if got := bench.Rank(c.m, c.n, 1, 2); got != c.want {
			t.Errorf("Rank(%d, %d) = %d, want %d", c.m, c.n, got, c.want)
		}
	}
	c, err := bench.Config("tiny")
	if err != nil || c.HiddenSize != 256 || c.VocabSize != 8192 || c.NumHiddenLayers != 8 {
		t.Errorf("tiny: %+v, %v", c, err)
	}
	if _, err := bench.Config("7B"); err == nil || !strings.Contains(err.Error(), "27B") {
		t.Errorf("unknown geometry: %v", err)
	}
}

// TestSyntheticMemoryFits is the dry check of the H200 runs: the 0.8B step at nb = 8, t = 512
// and the 27B geometry (streamed teacher, student at nb = 1, t = 64) fit the H200's limits
// (2 GiB per binding, 139 GiB), the 27B embedding being bound in slices; a lavapipe-sized
// binding limit is reported naming the buffer.
func TestSyntheticMemoryFits(t *testing.T) {
	const gib = 1 << 30
	c08, _ := bench.Config("0.8B")
	c27, _ := bench.Config("27B")
	for _, x := range []struct {
		c        arch.Config
		kind     nvgkit.NetKind
		nb, t    int
		streamed bool
	}{{c08, nvgkit.Teacher, 8, 512, false}, {c08, nvgkit.Student, 8, 512, false},
		{c27, nvgkit.Teacher, 8, 512, true}, {c27, nvgkit.Student, 1, 64, false}, {c27, nvgkit.Student, 8, 512, false}} {
		p, err := bench.Memory(x.c, x.kind, x.nb, x.t, 32, x.streamed)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Check(1<<40, 2*gib, 139*gib); err != nil {
			t.Errorf("hidden %d %v nb %d t %d: %v", x.c.HiddenSize, x.kind, x.nb, x.t, err)
		}
	}
	p, _ := bench.Memory(c27, nvgkit.Student, 1, 64, 32, false)
	// 27B: embedding and head 248320·5120·2 bytes each, above 2 GiB (bound in slices).
	if p.Largest != 248320*5120*2 || p.LargestBound >= 2*gib {
		t.Errorf("27B largest %d (%s), largest bound %d", p.Largest, p.LargestName, p.LargestBound)
	}
	// BLR at ~1 bit per weight (the peer's rank rule rounds down: a little under 1).
	if bpw := p.BitsPerWeight(); bpw < 0.9 || bpw > 1.0 {
		t.Errorf("27B bits per weight %g", bpw)
	}
	// A 27B teacher's MLP plane (17408·5120·2 bytes = 170 MiB) exceeds lavapipe's 128 MiB binding.
	tp, _ := bench.Memory(c27, nvgkit.Teacher, 1, 64, 32, true)
	if err := tp.Check(1<<40, 128<<20, 0); err == nil || !strings.Contains(err.Error(), "mlp") {
		t.Errorf("lavapipe binding limit: %v", err)
	}
	if err := p.Check(1<<31, 2*gib, 0); err == nil || !strings.Contains(err.Error(), "embed_tokens") {
		t.Errorf("2 GiB buffer limit: %v", err)
	}
}

// TestSyntheticMemoryMatchesNet: the plan's bytes equal what the tiny synthetic nets and
// their work allocate (resident teacher, student after a step's top-k upload).
func TestSyntheticMemoryMatchesNet(t *testing.T) {
	d := gputest.Open(t)
	c, _ := bench.Config("tiny")
	const nb, T, k = 1, 8, 4
	tp, err := bench.Memory(c, nvgkit.Teacher, nb, T, k, false)
	if err != nil {
		t.Fatal(err)
	}
	tn, err := bench.NewNet(d, c, nvgkit.Teacher, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Release()
	if tn.WeightBytes() != tp.WeightBytes {
		t.Errorf("teacher weights: net %d, plan %d", tn.WeightBytes(), tp.WeightBytes)
	}
	tw, err := nvgkit.NewWork(d, tn, nb, T)
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Release()
	if got, want := tw.Bytes()+8*nb*T*k, tp.WorkBytes; got != want {
		t.Errorf("teacher work: %d + top-k, plan %d", tw.Bytes(), want)
	}
	sp, _ := bench.Memory(c, nvgkit.Student, nb, T, k, false)
	sn, err := bench.NewNet(d, c, nvgkit.Student, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	if sn.WeightBytes() != sp.WeightBytes || sn.StateBytes() != sp.StateBytes || int64(sn.TrainableCount()) != sp.Trainables {
		t.Errorf("student: weights %d/%d, state %d/%d, trainables %d/%d", sn.WeightBytes(), sp.WeightBytes,
			sn.StateBytes(), sp.StateBytes, sn.TrainableCount(), sp.Trainables)
	}
}

// TestStreamedTeacherPlan checks the plan of a streamed teacher against the tiny synthetic
// teacher (q8) on the device, over 4 windows of 576 tokens, whose head goes up in two blocks
// (a 7168-row slice, then a ragged 1024 rows): the uploads per pass are the plan's, and the
// measured peak is the plan's total, or less by at most one head block (TotalBytes).
func TestStreamedTeacherPlan(t *testing.T) {
	d := gputest.Open(t)
	d.SetScratchLimit(0) // exact peaks
	defer d.SetScratchLimit(gpu.DefaultScratchLimit)
	c, _ := bench.Config("tiny")
	const nb, T, k = 4, 576, 8
	p, err := bench.TeacherMemory(c, gpu.QuantQ8, nb, T, k, true)
	if err != nil {
		t.Fatal(err)
	}
	if p.HeadBlockRows != 7168 {
		t.Errorf("head block of %d rows, want 7168 (the logits slice of %d rows)", p.HeadBlockRows, nb*T)
	}
	ids := make([][]int, nb)
	for i := range ids {
		for j := 0; j < T; j++ {
			ids[i] = append(ids[i], (i*7919+j*104729)%c.VocabSize)
		}
	}
	base := d.MemStats().CurrentBytes
	d.ResetPeak()
	tn, err := bench.NewTeacher(d, c, gpu.QuantQ8, 1, nvgkit.StreamLayers())
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Release()
	w, err := nvgkit.NewWork(d, tn, nb, T)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release()
	if _, err := nvgkit.TeacherTopK(tn, w, ids, k); err != nil {
		t.Fatal(err)
	}
	peak := d.MemStats().PeakBytes - base
	block := uint64(2 * p.HeadBlockRows * c.HiddenSize)
	if tn.UploadedBytes() != p.UploadBytes {
		t.Errorf("uploaded %d bytes in a pass, plan %d", tn.UploadedBytes(), p.UploadBytes)
	}
	if peak > p.TotalBytes() || peak+block < p.TotalBytes() {
		t.Errorf("peak %d bytes, plan %d (head block %d)", peak, p.TotalBytes(), block)
	}
	t.Logf("peak %d B, plan %d B (weights %d, work %d, temporaries %d; head block %d rows)", peak, p.TotalBytes(), p.WeightBytes, p.WorkBytes, p.TempBytes, p.HeadBlockRows)
}

// TestStreamedTeacher27BPlan is issue 35's memory target as a plan (no device): the 27B
// streamed teacher pass (8 × 512 tokens, top-32) with 8-bit projections needs at most 55 % of
// the GPU memory of the f16 teacher as issue 35 measured it on the H100
// (docs/bench/h100-2026-12-06-27B.json: its f16 row's plan and peak, the head resident then),
// the unplanned bytes measured beside the q8 plan then (its peak less its plan, 0.15 GB:
// recorder temporaries) added to the q8 plan now. Checked against the same file: a streamed
// pass uploads the measured layer bytes plus the f16 head, and the q8 and fp8 uploads are at
// most 55 % of the f16 teacher's (both stream the head now). Against the f16 teacher of this
// layout (whose head is streamed too) the 8-bit peak is about 76 %, logged, not checked:
// the work (1.55 GB) is the same for every weight format.
func TestStreamedTeacher27BPlan(t *testing.T) {
	raw, err := os.ReadFile("../docs/bench/h100-2026-12-06-27B.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	measured := map[string]struct{ plan, peak, upload uint64 }{}
	for _, r := range rep.Results {
		if r.Geom == "27B" && r.TeacherMode == "streamed" && r.Teacher != nil {
			measured[r.TeacherDType] = struct{ plan, peak, upload uint64 }{r.Teacher.PlanBytes, r.Teacher.PeakBytes, r.Teacher.UploadBytes}
		}
	}
	c, _ := bench.Config("27B")
	head := uint64(2 * c.VocabSize * c.HiddenSize)
	plans := map[string]bench.Plan{}
	for _, dt := range []string{"f16", "q8", "fp8"} {
		format, err := bench.ParseTeacherDType(dt)
		if err != nil {
			t.Fatal(err)
		}
		if plans[dt], err = bench.TeacherMemory(c, format, 8, 512, 32, true); err != nil {
			t.Fatal(err)
		}
		m, ok := measured[dt]
		if !ok || m.plan == 0 || m.peak == 0 || m.upload == 0 {
			t.Fatalf("%s: no measured 27B streamed row in the report: %+v", dt, m)
		}
		if got := plans[dt].UploadBytes; got != m.upload+head {
			t.Errorf("%s: plan uploads %d bytes per pass, want the measured layers' %d + the head's %d", dt, got, m.upload, head)
		}
	}
	f16 := measured["f16"]
	for _, dt := range []string{"q8", "fp8"} {
		p, m := plans[dt], measured[dt]
		est := p.TotalBytes() + (m.peak - m.plan)
		if limit := f16.peak * 55 / 100; est > limit || p.TotalBytes() > f16.plan*55/100 {
			t.Errorf("%s: plan %d B (+ %d B unplanned = %d B) against the f16 teacher's measured %d B (55 %%: %d B) and planned %d B",
				dt, p.TotalBytes(), m.peak-m.plan, est, f16.peak, limit, f16.plan)
		}
		if r := float64(p.UploadBytes) / float64(plans["f16"].UploadBytes); r > 0.55 {
			t.Errorf("%s: uploads %.1f %% of the f16 teacher's per pass", dt, 100*r)
		}
		t.Logf("%s: plan %.3f GiB (%.1f %% of the f16 teacher's measured %.3f GiB, estimated %.3f GiB: %.1f %%); %.1f %% of this layout's f16 plan %.3f GiB; uploads %.2f GB per pass, %.1f %% of the f16 teacher's %.2f GB (%.1f %% of its layers alone, %.2f GB)",
			dt, gib(p.TotalBytes()), 100*float64(p.TotalBytes())/float64(f16.peak), gib(f16.peak), gib(est), 100*float64(est)/float64(f16.peak),
			100*float64(p.TotalBytes())/float64(plans["f16"].TotalBytes()), gib(plans["f16"].TotalBytes()),
			float64(p.UploadBytes)/1e9, 100*float64(p.UploadBytes)/float64(plans["f16"].UploadBytes), float64(plans["f16"].UploadBytes)/1e9,
			100*float64(p.UploadBytes)/float64(f16.upload), float64(f16.upload)/1e9)
	}
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }

// TestDryCheckActivationBudget: the student step's dry check counts the activation budget
// (what kept layers may take), so a memory that holds the plan without it but not with it
// stops the geometry before anything is built, naming the student step.
func TestDryCheckActivationBudget(t *testing.T) {
	d := gputest.Open(t)
	c, _ := bench.Config("tiny")
	const nb, T, k = 1, 8, 4
	sp, err := bench.Memory(c, nvgkit.Student, nb, T, k, false)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := bench.TeacherMemory(c, 0, nb, T, k, false)
	if err != nil {
		t.Fatal(err)
	}
	both := tp
	both.WeightBytes += sp.WeightBytes + sp.StateBytes + sp.WorkBytes
	mem := max(tp.TotalBytes(), sp.TotalBytes(), both.TotalBytes()) + 1<<20
	info := d.Info()
	for _, p := range []bench.Plan{tp, sp, both} {
		if err := p.Check(info.MaxBufferSize, info.MaxStorageBindingSize, mem); err != nil {
			t.Fatalf("the plans must fit %d bytes without the budget: %v", mem, err)
		}
	}
	o := bench.Options{NB: nb, T: T, K: k, Steps: 1, Reps: 1, Teacher: "resident", PeakTF: 1, PeakGB: 1, Clip: 1,
		MemoryGiB: float64(mem) / (1 << 30), ActivationBudget: int64(mem - sp.TotalBytes() + 1)}
	res := bench.Measure(d, "tiny", "auto", o)
	if !strings.Contains(res.Error, "dry check of the student step") {
		t.Errorf("budget %d B beside a %d B student plan in %d B: error %q, want the student step's dry check", o.ActivationBudget, sp.TotalBytes(), mem, res.Error)
	}
}
