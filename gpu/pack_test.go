package gpu_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestPack moves buffers of awkward lengths into one arena and checks that every view keeps
// its contents, reads and writes only its own range, is cleared with the arena by one Zero,
// and is refused (not aborted) where WebGPU's per-buffer usage rule would fail; and that the
// memory accounting moves from the originals to the arena.
func TestPack(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(5, 6))
	lens := []int{1, 7, 64, 65, 300}
	bufs := make([]*gpu.Buffer, len(lens))
	want := make([][]float32, len(lens))
	for i, n := range lens {
		want[i], _ = randF32(rng, n, 1)
		bufs[i] = must(d.UploadFloat32("v", want[i], n)).T(t)
	}
	before := d.MemStats()
	arena, offs, err := d.Pack("arena", bufs)
	if err != nil {
		t.Fatal(err)
	}
	defer arena.Release()
	after := d.MemStats()
	var orig uint64
	for _, b := range bufs {
		orig += b.Bytes()
	}
	if got := after.CurrentBytes; got != before.CurrentBytes-orig+arena.Bytes() {
		t.Errorf("CurrentBytes %d after Pack, want %d − %d + %d", got, before.CurrentBytes, orig, arena.Bytes())
	}
	if after.Buffers != before.Buffers-len(bufs)+1 {
		t.Errorf("Buffers %d after Pack, want %d", after.Buffers, before.Buffers-len(bufs)+1)
	}
	wantOffs, total := d.PackLayout([]uint64{4, 28, 256, 260, 1200})
	if arena.Bytes() != total {
		t.Errorf("arena is %d bytes, PackLayout says %d", arena.Bytes(), total)
	}
	for i, o := range offs {
		if o != wantOffs[i] || o%d.StorageAlign() != 0 || (i > 0 && o < offs[i-1]+uint64(4*lens[i-1])) {
			t.Errorf("offset %d = %d (PackLayout %d): not aligned to %d or overlapping", i, o, wantOffs[i], d.StorageAlign())
		}
	}
	whole := must(d.ReadFloat32(arena)).T(t)
	for i, b := range bufs {
		got := must(d.ReadFloat32(b)).T(t)
		for j := range got {
			if got[j] != want[i][j] || whole[int(offs[i]/4)+j] != want[i][j] {
				t.Fatalf("view %d element %d: %g (arena %g), want %g", i, j, got[j], whole[int(offs[i]/4)+j], want[i][j])
			}
		}
	}
	for i, x := range whole {
		inside := false
		for k, o := range offs {
			inside = inside || (i >= int(o/4) && i < int(o/4)+lens[k])
		}
		if !inside && x != 0 {
			t.Fatalf("arena gap element %d = %g, want 0", i, x)
		}
	}
	// A write to one view changes only its range.
	ones := make([]float32, lens[2])
	for i := range ones {
		ones[i] = 1
	}
	must(0, d.WriteFloat32(bufs[2], ones)).T(t)
	if got := must(d.ReadFloat32(bufs[3])).T(t); got[0] != want[3][0] {
		t.Errorf("writing view 2 changed view 3: %g, want %g", got[0], want[3][0])
	}
	// A kernel over a view reads and writes its range: GradScale by 2.
	must(0, d.Run(func(r *gpu.Recorder) error { return gpu.GradScale(r, bufs[4], 2) })).T(t)
	got := must(d.ReadFloat32(bufs[4])).T(t)
	for j := range got {
		if got[j] != 2*want[4][j] {
			t.Fatalf("GradScale on view 4 element %d: %g, want %g", j, got[j], 2*want[4][j])
		}
	}
	if got := must(d.ReadFloat32(bufs[1])).T(t); got[6] != want[1][6] {
		t.Errorf("GradScale on view 4 changed view 1: %g, want %g", got[6], want[1][6])
	}
	// Two views of one arena bound read-write and read-only in one dispatch: an error.
	m := must(d.NewBuffer("m", gpu.F32, 65)).T(t)
	v := must(d.NewBuffer("v", gpu.F32, 65)).T(t)
	defer m.Release()
	defer v.Release()
	r := d.Begin()
	err = gpu.Adam(r, bufs[3], bufs[3], m, v, nil, 1, gpu.AdamConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8})
	if err == nil || !strings.Contains(err.Error(), "same buffer") {
		t.Errorf("Adam with param = grad (one view): %v, want a same-buffer error", err)
	}
	p65 := must(d.NewBuffer("p65", gpu.F32, 65)).T(t)
	g65 := must(d.NewBuffer("g65", gpu.F32, 65)).T(t)
	other, _, err := d.Pack("arena2", []*gpu.Buffer{p65, g65})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	cfg := gpu.AdamConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}
	if err := gpu.Adam(r, bufs[3], p65, m, v, nil, 1, cfg); err != nil {
		t.Errorf("Adam over views of two arenas: %v", err)
	}
	// Param (read-write) and grad (read-only) in one arena: refused at record time.
	err = gpu.Adam(r, p65, g65, m, v, nil, 1, cfg)
	if err == nil || !strings.Contains(err.Error(), "share arena") {
		t.Errorf("Adam with param and grad in one arena: %v, want a share-arena error", err)
	}
	if err := gpu.GradSumSquares(r, bufs[0], bufs[1]); err == nil || !strings.Contains(err.Error(), "out") {
		t.Errorf("GradSumSquares into a 7-element view: %v, want a length error", err)
	}
	r.Discard()
	// One Zero over the arena clears every view.
	must(0, d.Run(func(r *gpu.Recorder) error { return gpu.Zero(r, arena) })).T(t)
	for i, b := range bufs {
		for j, x := range must(d.ReadFloat32(b)).T(t) {
			if x != 0 {
				t.Fatalf("view %d element %d = %g after Zero(arena)", i, j, x)
			}
		}
	}
	// Bad packs change nothing.
	fresh := must(d.NewBuffer("fresh", gpu.F32, 3)).T(t)
	u := must(d.NewBuffer("u", gpu.U32, 3)).T(t)
	defer fresh.Release()
	defer u.Release()
	for name, bs := range map[string][]*gpu.Buffer{
		"none":        nil,
		"a view":      {bufs[0]},
		"twice":       {fresh, fresh},
		"mixed dtype": {fresh, u},
		"nil":         {fresh, nil},
		"an arena":    {fresh, arena},
	} {
		if _, _, err := d.Pack("bad", bs); err == nil {
			t.Errorf("Pack of %s: no error", name)
		}
	}
	if got := must(d.ReadFloat32(fresh)).T(t); len(got) != 3 {
		t.Errorf("fresh buffer unusable after refused packs")
	}
	// Releasing a view frees nothing; releasing the arena invalidates the views.
	mem := d.MemStats().CurrentBytes
	bufs[0].Release()
	if d.MemStats().CurrentBytes != mem {
		t.Errorf("releasing a view changed CurrentBytes")
	}
	arena.Release()
	if _, err := d.ReadFloat32(bufs[1]); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("read of a view of a released arena: %v, want a released error", err)
	}
	if d.MemStats().CurrentBytes != mem-total {
		t.Errorf("CurrentBytes %d after releasing the arena, want %d", d.MemStats().CurrentBytes, mem-total)
	}
	if _, _, err := d.Pack("huge", []*gpu.Buffer{fresh}); errors.Is(err, gpu.ErrOutOfMemory) {
		t.Errorf("a 12-byte pack ran out of memory: %v", err)
	}
}
