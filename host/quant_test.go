package host

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
)

// TestFP8E4M3Hand: codes worked out by hand from the bit fields.
func TestFP8E4M3Hand(t *testing.T) {
	for c, want := range map[byte]float64{
		0x00: 0, 0x80: 0, // ±0
		0x01: 1.0 / 512, 0x07: 7.0 / 512, // subnormals m·2⁻⁹
		0x08: 1.0 / 64, // smallest normal 2⁻⁶
		0x30: 0.5, 0x38: 1, 0x3C: 1.5, 0x3F: 1.875, 0x40: 2, 0x47: 3.75,
		0x78: 256, 0x7E: 448, // largest
		0xB8: -1, 0xC4: -3, 0xFE: -448,
	} {
		if got := FP8E4M3(c); got != want {
			t.Errorf("FP8E4M3(%#02x) = %g, want %g", c, got, want)
		}
	}
	if !math.IsNaN(FP8E4M3(0x7F)) || !math.IsNaN(FP8E4M3(0xFF)) {
		t.Error("0x7F, 0xFF are not NaN")
	}
	if !math.Signbit(FP8E4M3(0x80)) {
		t.Error("0x80 is not −0")
	}
}

// TestDequantizeHandBlocks: a 3×3 FP8 weight in 2×2 blocks (ragged last row and column of
// blocks) and a 2×3 q8 weight in groups of 2 (ragged last group), each element worked out
// by hand as value(code) · scale of its block.
func TestDequantizeHandBlocks(t *testing.T) {
	fp8 := QuantWeight{Scheme: cmf.QuantFP8, Out: 3, In: 3, Block: [2]int{2, 2},
		Codes: []byte{
			0x38, 0xB8, 0x40, // 1, −1 | 2
			0x3C, 0x00, 0x01, // 1.5, 0 | 2⁻⁹
			0x7E, 0x47, 0xC4, // 448, 3.75 | −3
		},
		Scales: []float64{0.5, 2, 0.25, 1}}
	want := []float64{
		0.5, -0.5, 4,
		0.75, 0, 2.0 / 512,
		112, 0.9375, -3,
	}
	got, err := Dequantize(fp8)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("fp8 W[%d] = %g, want %g", i, got[i], want[i])
		}
	}
	q8 := QuantWeight{Scheme: cmf.QuantQ8, Out: 2, In: 3, Block: [2]int{1, 2},
		Codes:  []byte{byte(127), byte(0x81), 5, byte(0xFF), 0, 100}, // 127, −127 | 5 ; −1, 0 | 100
		Scales: []float64{0.25, 0.5, 2, 0.125}}
	want = []float64{31.75, -31.75, 2.5, -2, 0, 12.5}
	if got, err = Dequantize(q8); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("q8 W[%d] = %g, want %g", i, got[i], want[i])
		}
	}
	// y = x·Wᵀ on the q8 weight: x = [1, 2, 3] → [31.75 − 63.5 + 7.5, −2 + 0 + 37.5].
	y, err := LinearQuant([]float64{1, 2, 3}, 1, q8)
	if err != nil {
		t.Fatal(err)
	}
	if y[0] != -24.25 || y[1] != 35.5 {
		t.Errorf("LinearQuant = %v, want [-24.25 35.5]", y)
	}
	for _, c := range []struct {
		w    QuantWeight
		want string
	}{
		{QuantWeight{Scheme: "q4", Out: 1, In: 1, Block: [2]int{1, 1}, Codes: []byte{0}, Scales: []float64{1}}, `unknown scheme "q4"`},
		{QuantWeight{Scheme: cmf.QuantQ8, Out: 2, In: 3, Block: [2]int{1, 2}, Codes: make([]byte, 5), Scales: make([]float64, 4)}, "5 codes, want out·in = 2·3"},
		{QuantWeight{Scheme: cmf.QuantFP8, Out: 3, In: 3, Block: [2]int{2, 2}, Codes: make([]byte, 9), Scales: make([]float64, 3)}, "3 scales, want ceil(out/2)·ceil(in/2) = 2·2"},
	} {
		if _, err := Dequantize(c.w); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

// TestDequantizeMatchesCMF: on random weights of awkward sizes, cmf's quantizers (FP8 in
// 128×128 blocks and in 3×5 blocks, q8) followed by the host's dequantization give exactly
// cmf's own float64 dequantization (two implementations of one rule), and every
// dequantized FP8 weight is within 2⁻⁴ relative plus half the block's subnormal step of
// the source (e4m3 keeps 3 mantissa bits).
func TestDequantizeMatchesCMF(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	out, in := 131, 259
	raw := make([]byte, 4*out*in)
	src := make([]float64, out*in)
	for i := range src {
		src[i] = float64(float32(rng.NormFloat64() * 0.02))
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(src[i])))
	}
	wt, err := cmf.NewTensor("w", cmf.F32, []int{out, in}, raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []func() (*cmf.Tensor, error){
		func() (*cmf.Tensor, error) { return cmf.QuantizeFP8(wt, [2]int{128, 128}) },
		func() (*cmf.Tensor, error) { return cmf.QuantizeFP8(wt, [2]int{3, 5}) },
		func() (*cmf.Tensor, error) { return cmf.QuantizeQ8(wt) },
	} {
		qt, err := q()
		if err != nil {
			t.Fatal(err)
		}
		qw, err := QuantWeightOf(qt)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Dequantize(qw)
		if err != nil {
			t.Fatal(err)
		}
		want, err := qt.Float64()
		if err != nil {
			t.Fatal(err)
		}
		sc := (in + qw.Block[1] - 1) / qw.Block[1]
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s %v: W[%d] = %g, cmf %g", qw.Scheme, qw.Block, i, got[i], want[i])
			}
			s := qw.Scales[(i/in/qw.Block[0])*sc+i%in/qw.Block[1]]
			bound := s / 2 // q8: half a step
			if qw.Scheme == cmf.QuantFP8 {
				bound = math.Abs(src[i])/16 + s*math.Pow(2, -10)
			}
			if e := math.Abs(got[i] - src[i]); e > bound*(1+1e-6) {
				t.Fatalf("%s %v: W[%d] = %g, source %g: |err| %g > %g", qw.Scheme, qw.Block, i, got[i], src[i], e, bound)
			}
		}
	}
}
