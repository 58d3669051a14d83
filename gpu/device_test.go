package gpu_test

import (
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

func TestInfo(t *testing.T) {
	d := gputest.Open(t)
	in := d.Info()
	t.Log(in)
	if in.MaxStorageBindingSize == 0 || in.MaxBufferSize == 0 || in.MaxGroupsPerDim == 0 {
		t.Errorf("limits missing: %+v", in)
	}
}

func TestBuffersAndMemStats(t *testing.T) {
	d := gputest.Open(t)
	d.FreeScratch() // other tests' kept scratch would be freed by the oversized buffer below
	before := d.MemStats()
	a := must(d.UploadF16("a", []uint16{0x3c00, 0xc000, 0x7bff}, 3)).T(t) // 1, -2, 65504
	b := must(d.UploadUint32("b", []uint32{1, 2, 3, 4, 5, 6}, 2, 3)).T(t)
	c := must(d.NewBuffer("c", gpu.F32, 5)).T(t)
	mid := d.MemStats()
	if got, want := mid.CurrentBytes-before.CurrentBytes, uint64(8+24+20); got != want {
		t.Errorf("current bytes grew by %d, want %d", got, want)
	}
	if mid.PeakBytes < mid.CurrentBytes || mid.Buffers != before.Buffers+3 {
		t.Errorf("stats %+v", mid)
	}
	if got := must(d.ReadF16(a)).T(t); got[0] != 0x3c00 || got[1] != 0xc000 || got[2] != 0x7bff || len(got) != 3 {
		t.Errorf("f16 roundtrip %x", got)
	}
	if got := must(d.ReadUint32(b)).T(t); got[5] != 6 {
		t.Errorf("u32 roundtrip %v", got)
	}
	if got := must(d.ReadFloat32(c)).T(t); got[0] != 0 || got[4] != 0 {
		t.Errorf("new buffer not zero: %v", got)
	}
	if _, err := d.ReadFloat32(a); err == nil {
		t.Error("reading f16 as f32 accepted")
	}
	if err := d.WriteFloat32(c, []float32{1, 2}); err == nil {
		t.Error("short write accepted")
	}
	if _, err := d.UploadFloat32("bad", []float32{1, 2, 3}, 2, 2); err == nil {
		t.Error("upload with wrong shape accepted")
	}
	if _, err := d.NewBuffer("bad", gpu.F32, 3, 0); err == nil {
		t.Error("zero dimension accepted")
	}
	if _, err := d.NewBuffer("huge", gpu.F32, 1<<40); err == nil || !strings.Contains(err.Error(), "huge") {
		t.Errorf("oversized buffer: %v", err)
	}
	a.Release()
	b.Release()
	c.Release()
	c.Release()
	if _, err := d.ReadFloat32(c); err == nil {
		t.Error("read of released buffer accepted")
	}
	if got := d.MemStats(); got.CurrentBytes != before.CurrentBytes || got.Buffers != before.Buffers {
		t.Errorf("after release %+v, before %+v", got, before)
	}
}

// TestScratchReuse: a recorder's temporary goes back to the device at Submit and the next
// Temp of the same byte size is that buffer again, cleared before the submit that uses it
// (Σ t² of the stale random contents must read 0); FreeScratch gives its memory back, and
// an allocation beyond the memory budget frees kept scratch before failing.
// TestFreedAheadWait checks that a submit waits for the GPU once the bytes of buffers
// released since the last wait pass the limit (freedAheadLimit), and only then: released
// temporaries of work still running hold memory until it completes. The wait is for the
// submission before the latest, so the latest submit's temporaries stay counted.
func TestFreedAheadWait(t *testing.T) {
	d := gputest.Open(t)
	defer gpu.SetFreedAheadLimit(10000)()
	defer d.SetScratchLimit(gpu.DefaultScratchLimit)
	d.SetScratchLimit(0) // every temp is released at its submit
	must(0, d.Sync()).T(t)
	if got := d.FreedAhead(); got != 0 {
		t.Fatalf("after Sync %d bytes released ahead, want 0", got)
	}
	step := func(n int) {
		t.Helper()
		r := d.Begin()
		tb := must(r.Temp("t", gpu.F32, n)).T(t)
		must(0, gpu.FillRandomUniform(r, tb, 7, 0, 1, 2)).T(t)
		must(0, r.Submit()).T(t)
	}
	step(1000) // 4,000 bytes: below the limit, no wait
	if got := d.FreedAhead(); got != 4000 {
		t.Errorf("after one 4,000-byte temp %d bytes released ahead, want 4000", got)
	}
	step(1000) // 8,000
	step(1000) // 12,000 > 10,000: waits for the second submit; the third's 4,000 still count
	if got := d.FreedAhead(); got != 4000 {
		t.Errorf("past the limit %d bytes released ahead, want 4000 (waited for all but the last submit)", got)
	}
	b := must(d.NewBuffer("b", gpu.F32, 10)).T(t)
	b.Release()
	if got := d.FreedAhead(); got != 4040 {
		t.Errorf("a released buffer counts %d bytes ahead, want 4040", got)
	}
	step(1000) // 8,040: below the limit
	step(1000) // 12,040: waits for the submit marked at 8,040
	if got := d.FreedAhead(); got != 4000 {
		t.Errorf("second wait: %d bytes released ahead, want 4000", got)
	}
	must(0, d.Sync()).T(t)
	if got := d.FreedAhead(); got != 0 {
		t.Errorf("after Sync %d bytes released ahead, want 0", got)
	}
}

func TestScratchReuse(t *testing.T) {
	d := gputest.Open(t)
	d.FreeScratch()
	base := d.MemStats()
	out := must(d.NewBuffer("out", gpu.F32, 1)).T(t)
	defer out.Release()
	r := d.Begin()
	t1 := must(r.Temp("t1", gpu.F32, 1000)).T(t)
	must(0, gpu.FillRandomUniform(r, t1, 7, 0, 1, 2)).T(t)
	must(0, r.Submit()).T(t)
	if got := d.MemStats(); got.CurrentBytes != base.CurrentBytes+out.Bytes()+4000 {
		t.Errorf("after the submit %d bytes, want the 4,000-byte scratch kept: %d", got.CurrentBytes, base.CurrentBytes+out.Bytes()+4000)
	}
	r = d.Begin()
	t2 := must(r.Temp("t2", gpu.U32, 10, 100)).T(t) // same bytes, other dtype and shape
	if t2 != t1 {
		t.Errorf("the second Temp of 4,000 bytes is a new buffer, want the kept one")
	}
	if t2.Label() != "t2" || t2.DType() != gpu.U32 || t2.Len() != 1000 {
		t.Errorf("reused temp is %v, want \"t2\" u32[10 100]", t2)
	}
	r.Discard()
	r = d.Begin()
	t3 := must(r.Temp("t3", gpu.F32, 1000)).T(t)
	must(0, gpu.Zero(r, out)).T(t)
	must(0, gpu.GradSumSquares(r, t3, out)).T(t)
	must(0, r.Submit()).T(t)
	if got := must(d.ReadFloat32(out)).T(t); got[0] != 0 {
		t.Errorf("a reused temp holds stale values: Σ t² = %g, want 0", got[0])
	}
	// A scratch buffer kept past its Submit cannot be packed; released by its holder, it is
	// skipped (not handed out again) by the next Temp.
	if _, _, err := d.Pack("p", []*gpu.Buffer{t3}); err == nil || !strings.Contains(err.Error(), "scratch buffer") {
		t.Errorf("Pack of a kept scratch buffer: %v, want a scratch-buffer error", err)
	}
	t3.Release()
	r = d.Begin()
	if t6 := must(r.Temp("t6", gpu.F32, 1000)).T(t); t6 == t3 {
		t.Errorf("Temp handed out a released scratch buffer")
	}
	must(0, r.Submit()).T(t)
	kept := d.MemStats().CurrentBytes
	d.FreeScratch()
	if got := d.MemStats().CurrentBytes; got >= kept || got != base.CurrentBytes+out.Bytes() {
		t.Errorf("after FreeScratch %d bytes (before %d), want %d", got, kept, base.CurrentBytes+out.Bytes())
	}
	// SetScratchLimit(0): nothing is kept after a submit.
	d.SetScratchLimit(0)
	r = d.Begin()
	must(r.Temp("t5", gpu.F32, 1000)).T(t)
	must(0, r.Submit()).T(t)
	if got := d.MemStats().CurrentBytes; got != base.CurrentBytes+out.Bytes() {
		t.Errorf("with reuse off %d bytes after the submit, want %d", got, base.CurrentBytes+out.Bytes())
	}
	d.SetScratchLimit(gpu.DefaultScratchLimit)
	// Kept scratch never makes an allocation fail: beyond the budget it is freed first.
	r = d.Begin()
	must(r.Temp("t4", gpu.F32, 1000)).T(t)
	must(0, r.Submit()).T(t)
	defer d.SetMemoryBudget(d.MemoryBudget())
	d.SetMemoryBudget(d.MemStats().CurrentBytes + 100)
	b, err := d.NewBuffer("needs the scratch's room", gpu.F32, 1000)
	if err != nil {
		t.Fatalf("allocation within the budget once scratch is freed: %v", err)
	}
	b.Release()
}

// TestDispatchChecks: every Dispatch mistake is an error from Go, before the driver sees it.
func TestDispatchChecks(t *testing.T) {
	d := gputest.Open(t)
	x := must(d.NewBuffer("x", gpu.F32, 100)).T(t)
	y := must(d.NewBuffer("y", gpu.F32, 100)).T(t)
	defer x.Release()
	defer y.Release()
	k := must(d.Kernel(gpu.KernelSpec{Name: "ResidualAdd", File: "residual_add.wgsl",
		Params: struct{ WG int }{256}, Bindings: []gpu.Access{gpu.ReadWrite, gpu.Read}, Uniforms: 1})).T(t)
	r := d.Begin()
	u := []uint32{100}
	checkErrors(t, nil, map[string]error{
		"grid too big":    r.Dispatch(k, [3]int{65536, 1, 1}, u, gpu.Whole(x), gpu.Whole(y)),
		"grid zero":       r.Dispatch(k, [3]int{1, 0, 1}, u, gpu.Whole(x), gpu.Whole(y)),
		"missing binding": r.Dispatch(k, [3]int{1, 1, 1}, u, gpu.Whole(x)),
		"missing uniform": r.Dispatch(k, [3]int{1, 1, 1}, nil, gpu.Whole(x), gpu.Whole(y)),
		"misaligned":      r.Dispatch(k, [3]int{1, 1, 1}, u, gpu.Binding{Buf: x, Offset: 4}, gpu.Whole(y)),
		"out of range":    r.Dispatch(k, [3]int{1, 1, 1}, u, gpu.Binding{Buf: x, Size: 404}, gpu.Whole(y)),
		"rw and r alias":  r.Dispatch(k, [3]int{1, 1, 1}, u, gpu.Whole(x), gpu.Whole(x)),
		"nil buffer":      r.Dispatch(k, [3]int{1, 1, 1}, u, gpu.Whole(x), gpu.Whole(nil)),
	})
	if r.Len() != 0 {
		t.Fatalf("%d bad dispatches recorded", r.Len())
	}
	// A buffer released between recording and submitting is caught at Submit.
	z := must(d.NewBuffer("z", gpu.F32, 100)).T(t)
	if err := r.Dispatch(k, [3]int{1, 1, 1}, u, gpu.Whole(x), gpu.Whole(z)); err != nil {
		t.Fatal(err)
	}
	z.Release()
	if err := r.Submit(); err == nil || !strings.Contains(err.Error(), `"z"`) {
		t.Errorf("submit with released buffer: %v", err)
	}
	if err := r.Submit(); err == nil {
		t.Error("second submit accepted")
	}
	if _, err := gpu.Grid1D(65535 * 65536); err == nil {
		t.Error("grid beyond 65535² accepted")
	}
	if g, _ := gpu.Grid1D(65536); g != [3]int{65535, 2, 1} {
		t.Errorf("Grid1D(65536) = %v", g)
	}
}

func TestProfile(t *testing.T) {
	d := gputest.Open(t)
	if !d.Info().Timestamps {
		if err := d.SetProfiling(true); err == nil {
			t.Fatal("profiling enabled without timestamp queries")
		}
		t.Skip("adapter has no timestamp queries (profiling correctly refused)")
	}
	x := must(d.NewBuffer("x", gpu.F32, 4096)).T(t)
	y := must(d.NewBuffer("y", gpu.F32, 4096)).T(t)
	defer x.Release()
	defer y.Release()
	if err := d.SetProfiling(true); err != nil {
		t.Fatal(err)
	}
	defer d.SetProfiling(false)
	d.ResetProfile()
	err := d.Run(func(r *gpu.Recorder) error {
		for range 5 {
			if err := gpu.ResidualAdd(r, x, y); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p := d.Profile()
	t.Log("\n" + p.String())
	if len(p) != 1 || p[0].Name != "ResidualAdd" || p[0].Calls != 5 || p[0].Total <= 0 {
		t.Errorf("profile %+v", p)
	}
	d.ResetProfile()
}

func TestCloseThenUse(t *testing.T) {
	gputest.Open(t) // skip/fail policy
	d, err := gpu.Open()
	if err != nil {
		t.Fatal(err)
	}
	x := must(d.NewBuffer("x", gpu.F32, 8)).T(t)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadFloat32(x); err == nil {
		t.Error("read after Close accepted")
	}
	if _, err := d.NewBuffer("y", gpu.F32, 8); err == nil {
		t.Error("allocation after Close accepted")
	}
	x.Release()
	if err := d.Close(); err != nil {
		t.Error(err)
	}
}

// TestAdapterSelection: NVG_ADAPTER picks by index or name substring; no match is an
// error listing the adapters.
func TestAdapterSelection(t *testing.T) {
	shared := gputest.Open(t)
	name := shared.Info().Name
	for _, sel := range []string{"0", strings.ToUpper(name[:3])} {
		t.Setenv("NVG_ADAPTER", sel)
		d, err := gpu.Open()
		if err != nil {
			t.Fatalf("NVG_ADAPTER=%s: %v", sel, err)
		}
		t.Logf("NVG_ADAPTER=%s → %s", sel, d.Info().Name)
		d.Close()
	}
	t.Setenv("NVG_ADAPTER", "no-such-adapter")
	if _, err := gpu.Open(); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("unmatched NVG_ADAPTER: %v (want an error listing %q)", err, name)
	}
	t.Setenv("NVG_ADAPTER", "99")
	if _, err := gpu.Open(); err == nil {
		t.Error("out-of-range NVG_ADAPTER index accepted")
	}
}

// TestBindingLimit: a binding above maxStorageBufferBindingSize is refused in Go (the driver
// would abort the process at Submit). Needs a buffer just above the limit, so it runs only
// where the limit is small (128 MiB on lavapipe).
func TestBindingLimit(t *testing.T) {
	d := gputest.Open(t)
	lim := d.Info().MaxStorageBindingSize
	if lim > 256<<20 {
		t.Skipf("maxStorageBufferBindingSize is %d MiB: a buffer above it is too big for a unit test", lim>>20)
	}
	n := int(lim/4) + 64
	x := must(d.NewBuffer("big x", gpu.F32, n)).T(t)
	y := must(d.NewBuffer("big y", gpu.F32, n)).T(t)
	defer x.Release()
	defer y.Release()
	r := d.Begin()
	defer r.Discard()
	err := gpu.ResidualAdd(r, x, y)
	if err == nil || !strings.Contains(err.Error(), "maxStorageBufferBindingSize") {
		t.Fatalf("oversized binding: %v", err)
	}
	t.Log(err)
}

// TestProfileMixed profiles one batch of different kernels (a small MLP block and the head)
// and checks that each gets its own row with its dispatch count.
func TestProfileMixed(t *testing.T) {
	d := gputest.Open(t)
	if !d.Info().Timestamps {
		t.Skip("adapter has no timestamp queries")
	}
	rows, hidden, inter, vocab, k := 9, 40, 72, 300, 8
	mk := func(label string, dt gpu.DType, shape ...int) *gpu.Buffer {
		b := must(d.NewBuffer(label, dt, shape...)).T(t)
		t.Cleanup(b.Release)
		return b
	}
	emb, x, xn, nw := mk("emb", gpu.F16, vocab, hidden), mk("x", gpu.F32, rows, hidden), mk("xn", gpu.F32, rows, hidden), mk("norm w", gpu.F32, hidden)
	wg, wu, wd := mk("gate W", gpu.F16, inter, hidden), mk("up W", gpu.F16, inter, hidden), mk("down W", gpu.F16, hidden, inter)
	g, u, a, dn := mk("g", gpu.F32, rows, inter), mk("u", gpu.F32, rows, inter), mk("a", gpu.F32, rows, inter), mk("down", gpu.F32, rows, hidden)
	lse, ids, logp := mk("lse", gpu.F32, rows), mk("ids", gpu.U32, rows, k), mk("logp", gpu.F32, rows, k)
	tok := []int{1, 5, 9, 200, 299, 0, 3, 3, 7}
	block := func(r *gpu.Recorder) error {
		for _, f := range []func() error{
			func() error { return gpu.Embedding(r, emb, tok, x) },
			func() error { return gpu.RMSNorm(r, x, nw, xn, rows, hidden, 1e-6, true) },
			func() error { return gpu.Linear(r, xn, wg, g, rows, hidden, inter) },
			func() error { return gpu.Linear(r, xn, wu, u, rows, hidden, inter) },
			func() error { return gpu.SwiGLU(r, g, u, a) },
			func() error { return gpu.Linear(r, a, wd, dn, rows, inter, hidden) },
			func() error { return gpu.ResidualAdd(r, x, dn) },
			func() error { return gpu.RMSNorm(r, x, nw, xn, rows, hidden, 1e-6, true) },
			func() error {
				return gpu.LogitsTopK(r, xn, emb, gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: k, SliceRows: 128}, lse, ids, logp)
			},
		} {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	}
	// Warm-up: lavapipe compiles a pipeline's machine code at its first dispatch, which
	// would otherwise land in the first timed pass.
	if err := d.Run(block); err != nil {
		t.Fatal(err)
	}
	if err := d.SetProfiling(true); err != nil {
		t.Fatal(err)
	}
	defer d.SetProfiling(false)
	d.ResetProfile()
	defer d.ResetProfile()
	if err := d.Run(block); err != nil {
		t.Fatal(err)
	}
	p := d.Profile()
	t.Log("\n" + p.String())
	want := map[string]int{"Embedding": 1, "RMSNorm": 2, "Linear": 3, "SwiGLU": 1, "ResidualAdd": 1,
		"LogitsTopK.logits": 3, "LogitsTopK.merge": 3}
	for _, row := range p {
		if want[row.Name] != row.Calls {
			t.Errorf("%s: %d calls, want %d", row.Name, row.Calls, want[row.Name])
		}
		if row.Name == "Linear" {
			// Declared cost (Recorder.Cost): 2·rows·K·N per GEMM; bytes: x, y in f32, W in f16.
			R, Hd, I := float64(rows), float64(hidden), float64(inter)
			flops := 2 * R * Hd * I * 3
			bytes := 2*(4*R*Hd+2*Hd*I+4*R*I) + (4*R*I + 2*I*Hd + 4*R*Hd)
			if row.Flops != flops || row.Bytes != bytes {
				t.Errorf("Linear cost: %g flops, %g bytes; want %g, %g", row.Flops, row.Bytes, flops, bytes)
			}
			if row.TFLOPs() <= 0 || row.GBps() <= 0 {
				t.Errorf("Linear rates %g TFLOP/s %g GB/s, want > 0", row.TFLOPs(), row.GBps())
			}
		}
		delete(want, row.Name)
	}
	if len(want) > 0 {
		t.Errorf("missing rows: %v", want)
	}
}

// TestNilReceivers: a nil device or recorder is an error, never a panic.
func TestNilReceivers(t *testing.T) {
	var nd *gpu.Device
	if _, err := nd.NewBuffer("x", gpu.F32, 4); err == nil {
		t.Error("NewBuffer on a nil device accepted")
	}
	if _, err := nd.UploadFloat32("x", []float32{1}, 1); err == nil {
		t.Error("upload on a nil device accepted")
	}
	if err := nd.Run(func(r *gpu.Recorder) error { return nil }); err == nil {
		t.Error("Run on a nil device accepted")
	}
	d := gputest.Open(t)
	x := must(d.NewBuffer("x", gpu.F32, 4)).T(t)
	y := must(d.NewBuffer("y", gpu.F32, 4)).T(t)
	defer x.Release()
	defer y.Release()
	if err := gpu.ResidualAdd(nil, x, y); err == nil {
		t.Error("nil recorder accepted")
	}
	if err := gpu.Linear(nil, x, y, x, 1, 4, 1); err == nil {
		t.Error("nil recorder accepted by Linear")
	}
	if err := nd.Begin().Submit(); err == nil {
		t.Error("Submit of a nil device's recorder accepted")
	}
}

// TestRecorderBorrow: a borrowed buffer is handed out again only after its taker is done, by a
// Borrow of the same byte size in the same recording, and a later taker's writes follow the
// earlier taker's reads (the sums of squares of two fills through one buffer, in one submit,
// equal those of two submits through fresh temporaries).
func TestRecorderBorrow(t *testing.T) {
	d := gputest.Open(t)
	sums := func(shared bool) [2]float32 {
		outs := [2]*gpu.Buffer{must(d.NewBuffer("out0", gpu.F32, 1)).T(t), must(d.NewBuffer("out1", gpu.F32, 1)).T(t)}
		defer outs[0].Release()
		defer outs[1].Release()
		var got [2]float32
		for i := range 2 {
			r := d.Begin()
			b, done, err := r.Borrow("b", gpu.F32, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if !shared {
				b = must(r.Temp("t", gpu.F32, 1000)).T(t)
			}
			must(0, gpu.Zero(r, outs[i])).T(t)
			must(0, gpu.FillRandomUniform(r, b, uint32(11+i), 0, -1, 1)).T(t)
			must(0, gpu.GradSumSquares(r, b, outs[i])).T(t)
			done()
			if shared && i == 0 { // the second fill in the same recording, through the same buffer
				b2, done2, err := r.Borrow("b2", gpu.F32, 1000)
				if err != nil {
					t.Fatal(err)
				}
				if b2 != b {
					t.Fatalf("Borrow after done: a new buffer, want the one given back")
				}
				must(0, gpu.Zero(r, outs[1])).T(t)
				must(0, gpu.FillRandomUniform(r, b2, 12, 0, -1, 1)).T(t)
				must(0, gpu.GradSumSquares(r, b2, outs[1])).T(t)
				done2()
			}
			must(0, r.Submit()).T(t)
			got[i] = must(d.ReadFloat32(outs[i])).T(t)[0]
			if shared {
				got[1] = must(d.ReadFloat32(outs[1])).T(t)[0]
				break
			}
		}
		return got
	}
	want, got := sums(false), sums(true)
	if got != want || want[0] == want[1] {
		t.Errorf("Σ b² of two fills through one borrowed buffer = %v, through two temporaries %v (want equal, and the fills different)", got, want)
	}

	r := d.Begin()
	defer r.Discard()
	borrow := func(label string, dtype gpu.DType, shape ...int) (*gpu.Buffer, func()) {
		t.Helper()
		b, done, err := r.Borrow(label, dtype, shape...)
		if err != nil {
			t.Fatal(err)
		}
		return b, done
	}
	b1, done1 := borrow("b1", gpu.F32, 1000)
	b2, _ := borrow("b2", gpu.F32, 1000)
	if b2 == b1 {
		t.Fatal("Borrow handed out a buffer still in use")
	}
	done1()
	done1() // twice is harmless
	if b3, _ := borrow("b3", gpu.F32, 250); b3 == b1 {
		t.Error("Borrow of another size handed out the given-back buffer")
	}
	b4, _ := borrow("b4", gpu.U32, 10, 100)
	if b4 != b1 || b4.Label() != "b4" || b4.DType() != gpu.U32 || b4.Len() != 1000 {
		t.Errorf("Borrow of the given-back size: %v (same buffer %v), want b1 relabelled \"b4\" u32[10 100]", b4, b4 == b1)
	}
	if _, _, err := r.Borrow("bad", gpu.F32, 0); err == nil {
		t.Error("Borrow of an empty shape: no error")
	}
	r.Discard()
	if _, _, err := r.Borrow("late", gpu.F32, 4); err == nil {
		t.Error("Borrow on a discarded recorder: no error")
	}
}
