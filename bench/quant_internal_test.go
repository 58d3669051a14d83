package bench

import (
	"slices"
	"testing"
	"unsafe"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/prng"
	"github.com/nvg-project/nvg/nvgkit"
)

// TestQuantizePlaneMatchesWhole checks that quantizing a weight 128 rows per task gives the
// codes and scales of cmf's quantizers on the whole tensor, for a ragged shape (300 × 200:
// partial last blocks both ways) in both formats.
func TestQuantizePlaneMatchesWhole(t *testing.T) {
	const out, in = 300, 200
	w := make([]uint16, out*in)
	if err := prng.FillUniformF16(w, 7, 0, 0.1); err != nil {
		t.Fatal(err)
	}
	dense, err := cmf.NewTensor("w", cmf.F16, []int{out, in}, unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 2*len(w)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []gpu.QuantFormat{gpu.QuantFP8, gpu.QuantQ8} {
		got, err := quantizePlane("w", w, out, in, f)
		if err != nil {
			t.Fatal(err)
		}
		var qt *cmf.Tensor
		if f == gpu.QuantFP8 {
			qt, err = cmf.QuantizeFP8(dense, cmf.DefaultFP8Block)
		} else {
			qt, err = cmf.QuantizeQ8(dense)
		}
		if err != nil {
			t.Fatal(err)
		}
		want, err := nvgkit.QuantPlaneOf(qt)
		if err != nil {
			t.Fatal(err)
		}
		if got.Format != want.Format || got.Block != want.Block || !slices.Equal(got.Codes.U32, want.Codes.U32) ||
			!slices.Equal(got.Scales.F32, want.Scales.F32) || !slices.Equal(got.Scales.F16, want.Scales.F16) {
			t.Errorf("%v: the 128-row tasks' plane differs from the whole tensor's", f)
		}
	}
}
