package nvgkit_test

import (
	"math"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/nvgkit"
)

// TestStudentSigns runs the tiny BLR student's step with sign learning off and on: the metric
// gradients must be bit-identical (signs only add work beside them); the scores move, padded
// ranks keep score 0; one captured matrix's sign gradient is read; SignStep flips at most
// the budget per matrix, exactly the reported signs change (ReadSigns before/after), their
// scores reset, padding never flips; the export carries the flipped bits. The net's signs are
// put back afterwards (the net is shared by the package's tests).
func TestStudentSigns(t *testing.T) {
	_, c := blrStudent(t)
	net := c.net
	names := net.SignNames()
	if len(names) == 0 {
		t.Fatal("no sign matrices")
	}
	orig := map[string][]byte{}
	for _, nm := range names {
		orig[nm] = must(net.ReadSigns(nm)).T(t)
	}
	defer func() {
		if err := nvgkit.DisableSigns(net); err != nil {
			t.Error(err)
		}
		for _, nm := range names {
			if err := net.WriteSigns(nm, orig[nm]); err != nil {
				t.Error(err)
			}
		}
	}()
	if _, err := nvgkit.Step(net, c.work, c.ids, c.top); err != nil {
		t.Fatal(err)
	}
	off := must(nvgkit.Grads(net)).T(t)
	must(0, nvgkit.ZeroGrads(net)).T(t)
	cfg := nvgkit.DefaultSigns()
	cfg.Tau, cfg.MaxFlipFrac = 4, 0.01
	must(0, nvgkit.EnableSigns(net, cfg)).T(t)
	// The matrix with the most rank padding, to check it stays masked.
	pick, pad := names[0], -1
	for _, nm := range names {
		rows, cols, live := must3(net.SignShape(nm))
		_ = rows
		if p := cols - live; p > pad && nm[len(nm)-1] == 'U' {
			pick, pad = nm, p
		}
	}
	must(0, net.CaptureSignGrad(pick, true)).T(t)
	if _, err := nvgkit.Step(net, c.work, c.ids, c.top); err != nil {
		t.Fatal(err)
	}
	on := must(nvgkit.Grads(net)).T(t)
	for k, a := range off {
		b := on[k]
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s[%d]: metric gradient %g with signs off, %g on", k, i, a[i], b[i])
			}
		}
	}
	rows, cols, live := must3(net.SignShape(pick))
	g := must(net.ReadSignGrad(pick, true)).T(t)
	nz := 0
	for e, v := range g {
		if e%cols >= live && v != 0 {
			t.Fatalf("%s: padded sign gradient [%d] = %g", pick, e, v)
		}
		if v != 0 {
			nz++
		}
	}
	if nz == 0 {
		t.Fatalf("%s: sign gradient all zero", pick)
	}
	t.Logf("%s: %d×%d, live %d, %d non-zero sign gradients", pick, rows, cols, live, nz)
	scores := map[string][]int8{}
	moved := 0
	for _, nm := range names {
		scores[nm] = must(net.ReadSignScores(nm)).T(t)
		_, cols, live := must3(net.SignShape(nm))
		isV := nm[len(nm)-1] == 'V'
		for e, s := range scores[nm] {
			k := e % cols
			if isV {
				k = e / cols
			}
			if k >= live && s != 0 {
				t.Fatalf("%s: padded score[%d] = %d", nm, e, s)
			}
			if s != 0 {
				moved++
			}
		}
	}
	if moved == 0 {
		t.Fatal("no score moved")
	}
	must(0, nvgkit.SignStep(net, 1)).T(t)
	perLayer, perMatrix := must2(nvgkit.SignFlipCounts(net))
	total := 0
	for _, nm := range names {
		rows, cols, live := must3(net.SignShape(nm))
		after := must(net.ReadSigns(nm)).T(t)
		sc := must(net.ReadSignScores(nm)).T(t)
		isV := nm[len(nm)-1] == 'V'
		changed := 0
		for e := 0; e < rows*cols; e++ {
			if (after[e>>3]^orig[nm][e>>3])>>(e&7)&1 == 0 {
				if sc[e] != scores[nm][e] {
					t.Fatalf("%s: unflipped score[%d] changed %d → %d", nm, e, scores[nm][e], sc[e])
				}
				continue
			}
			changed++
			k := e % cols
			if isV {
				k = e / cols
			}
			if k >= live || sc[e] != 0 || scores[nm][e] < int8(cfg.Tau) {
				t.Fatalf("%s: sign %d flipped (rank %d, live %d, score %d → %d)", nm, e, k, live, scores[nm][e], sc[e])
			}
		}
		liveSigns := rows * cols / max(rows, cols)
		if isV {
			liveSigns = live * cols
		} else {
			liveSigns = rows * live
		}
		if changed != perMatrix[nm] || changed > int(math.Ceil(cfg.MaxFlipFrac*float64(liveSigns))) {
			t.Fatalf("%s: %d bits changed, %d reported, %d live signs", nm, changed, perMatrix[nm], liveSigns)
		}
		total += changed
	}
	sum := 0
	for _, v := range perLayer {
		sum += v
	}
	if sum != total || total == 0 {
		t.Fatalf("flips per layer %v sum to %d, %d bits changed", perLayer, sum, total)
	}
	t.Logf("flips per layer %v", perLayer)
	out := must(nvgkit.Export(net, c.student)).T(t)
	for _, nm := range names {
		tensor, p, f := nm[:len(nm)-5], int(nm[len(nm)-3]-'0'), nm[len(nm)-1]
		w := must(cmf.BLRFromTensor(must(out.Tensor(tensor)).T(t))).T(t)
		got := w.Paths[p].U
		if f == 'V' {
			got = w.Paths[p].V
		}
		if string(got) != string(must(net.ReadSigns(nm)).T(t)) {
			t.Fatalf("export of %s does not carry the learned signs", nm)
		}
	}
}

type res[T any] struct {
	v   T
	err error
}

func must[T any](v T, err error) res[T] { return res[T]{v, err} }

func (r res[T]) T(t testing.TB) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

func must3(a, b, c int, err error) (int, int, int) {
	if err != nil {
		panic(err)
	}
	return a, b, c
}
