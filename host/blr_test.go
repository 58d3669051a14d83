package host

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/compress"
	"gonum.org/v1/gonum/mat"
)

// blrTensor compresses a random 24×16 matrix into a BLR tensor (2 paths, so both are
// exercised) and returns it with its decoded weight.
func blrTensor(t *testing.T) (*cmf.Tensor, *cmf.BLRWeight) {
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]float64, 24*16)
	for i := range w {
		w[i] = rng.NormFloat64()
	}
	bw, _, err := compress.Matrix("l.weight", w, 24, 16, compress.Options{BitsPerWeight: 8, Paths: compress.Paths2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cmf.EncodeBLR(bw)
	if err != nil {
		t.Fatal(err)
	}
	tn, err := cmf.NewTensor("l.weight", cmf.BLR, []int{24, 16}, p)
	if err != nil {
		t.Fatal(err)
	}
	return tn, bw
}

// TestBLRLinearMatchesDense checks NewBLRLinear's Apply against x·Ŵᵀ computed by gonum from
// the dense reconstruction, and through linearFromTensor (the path Load takes).
func TestBLRLinearMatchesDense(t *testing.T) {
	tn, bw := blrTensor(t)
	for _, mk := range []func(*cmf.Tensor) (Linear, error){NewBLRLinear, linearFromTensor} {
		l, err := mk(tn)
		if err != nil {
			t.Fatal(err)
		}
		if l.In() != 16 || l.Out() != 24 {
			t.Fatalf("In %d Out %d", l.In(), l.Out())
		}
		rng := rand.New(rand.NewPCG(3, 4))
		rows := 5
		x := make([]float64, rows*16)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		var want mat.Dense
		want.Mul(mat.NewDense(rows, 16, x), mat.NewDense(24, 16, bw.Dense()).T())
		y := l.Apply(x, rows)
		for r := 0; r < rows; r++ {
			for i := 0; i < 24; i++ {
				if d := math.Abs(y[r*24+i] - want.At(r, i)); d > 1e-12*(1+math.Abs(want.At(r, i))) {
					t.Fatalf("y[%d][%d] = %g, want %g", r, i, y[r*24+i], want.At(r, i))
				}
			}
		}
	}
}

func TestNewBLRLinearErrors(t *testing.T) {
	tn, _ := blrTensor(t)
	p, _ := tn.Bytes()
	bad, _ := cmf.NewTensor("l.weight", cmf.BLR, []int{24, 16}, p[:len(p)-1])
	if _, err := NewBLRLinear(bad); err == nil || !strings.Contains(err.Error(), "l.weight") || !strings.Contains(err.Error(), "needs") {
		t.Errorf("truncated payload: %v", err)
	}
	wrong, _ := cmf.NewTensor("l.weight", cmf.BLR, []int{16, 24}, p)
	if _, err := NewBLRLinear(wrong); err == nil || !strings.Contains(err.Error(), "shape is [16 24]") {
		t.Errorf("shape mismatch: %v", err)
	}
	f, _ := cmf.NewFloatTensor("f.weight", cmf.F32, []int{2, 8}, make([]float64, 16))
	if _, err := NewBLRLinear(f); err == nil || !strings.Contains(err.Error(), "f.weight") {
		t.Errorf("F32 tensor: %v", err)
	}
}
