package cmf

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/x448/float16"
)

// e4m3Ref is the value of code c by the format's definition (sign, exponent bias 7, 3
// mantissa bits, e = 0 subnormal, 0x7F/0xFF NaN), written independently of fp8.go.
func e4m3Ref(c byte) float64 {
	e, m := int(c>>3)&15, float64(c&7)
	if e == 15 && m == 7 {
		return math.NaN()
	}
	v := math.Ldexp(1+m/8, e-7)
	if e == 0 {
		v = math.Ldexp(m, -9)
	}
	if c&0x80 != 0 {
		return -v
	}
	return v
}

// TestFP8E4M3Codes checks the codec on hand values, every code against the definition,
// and the encoder against a brute-force nearest search (ties to the even mantissa).
func TestFP8E4M3Codes(t *testing.T) {
	for c, want := range map[byte]float64{0x00: 0, 0x01: 0x1p-9, 0x07: 7 * 0x1p-9, 0x08: 0x1p-6, 0x38: 1, 0x39: 1.125,
		0x3F: 1.875, 0x40: 2, 0x6E: 112, 0x76: 224, 0x7E: 448, 0xB8: -1, 0xFE: -448} {
		if got := FP8E4M3Value(c); float64(got) != want {
			t.Errorf("FP8E4M3Value(%#02x) = %g, want %g", c, got, want)
		}
	}
	for c := 0; c < 256; c++ {
		got, want := FP8E4M3Value(byte(c)), e4m3Ref(byte(c))
		if math.IsNaN(want) != math.IsNaN(float64(got)) || !math.IsNaN(want) && float64(got) != want {
			t.Fatalf("code %#02x: %g, want %g", c, got, want)
		}
		if !math.IsNaN(want) && FP8E4M3Code(got) != byte(c) {
			t.Fatalf("FP8E4M3Code(%g) = %#02x, want %#02x", got, FP8E4M3Code(got), c)
		}
	}
	if FP8E4M3Value(0x80) != 0 || !math.Signbit(float64(FP8E4M3Value(0x80))) {
		t.Error("0x80 is not −0")
	}
	for x, want := range map[float32]byte{1.0625: 0x38, 1.1875: 0x3A, 0x1p-10: 0x00, 3 * 0x1p-10: 0x02, 460: 0x7E, -1e9: 0xFE,
		float32(math.Inf(1)): 0x7E, float32(math.Copysign(0, -1)): 0x80, float32(math.NaN()): 0x7F, 15 * 0x1p-10: 0x08} {
		if got := FP8E4M3Code(x); got != want {
			t.Errorf("FP8E4M3Code(%g) = %#02x, want %#02x", x, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		x := float32(math.Ldexp(rng.Float64()*2-1, rng.IntN(20)-12))
		got := FP8E4M3Code(x)
		best, bestC := math.Inf(1), -1
		for c := 0; c < 256; c++ {
			v := e4m3Ref(byte(c))
			if math.IsNaN(v) || math.Signbit(v) != math.Signbit(float64(x)) {
				continue
			}
			d := math.Abs(v - float64(x))
			if d < best || d == best && c&1 == 0 {
				best, bestC = d, c
			}
		}
		if math.Abs(float64(x)) >= 448 {
			bestC = int(FP8E4M3Code(448)) | int(got&0x80)
		}
		if int(got) != bestC {
			t.Fatalf("FP8E4M3Code(%g) = %#02x (%g), nearest is %#02x (%g)", x, got, FP8E4M3Value(got), bestC, e4m3Ref(byte(bestC)))
		}
	}
}

// f32Tensor is an in-memory F32 tensor [rows, cols] of v.
func f32Tensor(t *testing.T, name string, rows, cols int, v []float32) *Tensor {
	t.Helper()
	tt, err := NewTensor(name, F32, []int{rows, cols}, f32Bytes(v))
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

func f32s(t *testing.T, tt *Tensor) []float32 {
	t.Helper()
	b, err := tt.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// TestQuantizeFP8HandBlock quantizes a 3×3 weight in 2×2 blocks (ragged last row and column
// of blocks) by transformers' rule, worked by hand in float32: block (0,0) amax 4, s = 112;
// block (0,1) amax 0.2f, s = 448/0.2f = 2240 exactly, 0.1f·2240 = 224 after rounding; block
// (1,0) amax 3, s = f32(448/3) = 149.33333, 3·s rounds to 448 and 1/s to 0.0066964286
// (not 3/448); block (1,1) all zero, s = 1.
func TestQuantizeFP8HandBlock(t *testing.T) {
	w := f32Tensor(t, "w", 3, 3, []float32{1, -2, 0.1, 0.5, 4, 0.2, 3, 0, 0})
	q, err := QuantizeFP8(w, [2]int{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	codes, err := q.QuantCodes()
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x6E, 0xF6, 0x76, 0x66, 0x7E, 0x7E, 0x7E, 0x00, 0x00}; !bytes.Equal(codes, want) {
		t.Errorf("codes % x, want % x", codes, want)
	}
	if q.DType != F8E4M3 || q.Quant.Scale.Name != "w_scale_inv" || !reflect.DeepEqual(q.Quant.Scale.Shape, []int{2, 2}) || q.Quant.Scale.DType != F32 {
		t.Fatalf("quantized %s %v, scales %s %s %v", q.DType, q.Shape, q.Quant.Scale.Name, q.Quant.Scale.DType, q.Quant.Scale.Shape)
	}
	inv, err := q.QuantScales()
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{1.0 / 112, 0.00044642857392318547, 0.0066964286379516125, 1}; !reflect.DeepEqual(inv, want) {
		t.Errorf("weight_scale_inv %v, want %v", inv, want)
	}
	v, err := q.Float64()
	if err != nil {
		t.Fatal(err)
	}
	s0 := float64(float32(1.0 / 112))
	want := []float64{112 * s0, -224 * s0, 224 * float64(float32(0.00044642857392318547)), 56 * s0, 448 * s0,
		448 * float64(float32(0.00044642857392318547)), 448 * float64(float32(0.0066964286379516125)), 0, 0}
	for i := range want {
		if math.Abs(v[i]-want[i]) > 1e-15 {
			t.Errorf("Float64[%d] = %g, want %g", i, v[i], want[i])
		}
	}
}

// TestQuantizeQ8HandGroups quantizes a 2×130 weight (a full group of 128 and a ragged one
// of 2 per row), worked by hand: row 0 group 0 amax 127, s = 1 (codes round half to even:
// 2.5 → 2, 3.5 → 4); row 0 group 1 amax 0.001f, s = the least f16 ≥ 7.874e-6, the subnormal
// 133·2⁻²⁴ (0x0085); row 1 group 0 amax 1, s = least f16 ≥ 1/127, 0x2009 = 0.0078811646
// (0x2008 = 0.0078735352 is below); row 1 group 1 all zero, s = 0.
func TestQuantizeQ8HandGroups(t *testing.T) {
	v := make([]float32, 2*130)
	copy(v, []float32{127, -127, 2.5, 3.5, -0.4, 126.6})
	v[128], v[129] = 0.001, -0.0005
	v[130], v[131] = 1, -0.5
	q, err := QuantizeQ8(f32Tensor(t, "w", 2, 130, v))
	if err != nil {
		t.Fatal(err)
	}
	codes, err := q.QuantCodes()
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int8, 260)
	copy(want, []int8{127, -127, 2, 4, 0, 127})
	want[128], want[129], want[130], want[131] = 126, -63, 127, -63
	for i, c := range codes {
		if int8(c) != want[i] {
			t.Fatalf("code %d = %d, want %d", i, int8(c), want[i])
		}
	}
	raw, _ := q.Quant.Scale.Bytes()
	var bits []uint16
	for i := 0; i < len(raw); i += 2 {
		bits = append(bits, binary.LittleEndian.Uint16(raw[i:]))
	}
	if wantBits := []uint16{0x3C00, 0x0085, 0x2009, 0}; !reflect.DeepEqual(bits, wantBits) {
		t.Errorf("scales %04x, want %04x", bits, wantBits)
	}
	if q.DType != I8 || q.Quant.Scale.Name != "w_scale" || q.Quant.Scale.DType != F16 || q.Quant.Block != [2]int{1, 128} {
		t.Errorf("quantized %s, scales %s %s, block %v", q.DType, q.Quant.Scale.Name, q.Quant.Scale.DType, q.Quant.Block)
	}
}

// TestQuantizeQ8Bound: on random weights of awkward width, every dequantized q8 weight is
// within s/2 of the source (s its group's scale), no code is −128, and each group's scale is
// the least f16 ≥ amax/127.
func TestQuantizeQ8Bound(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rows, cols := 7, 300
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(30)-20))
	}
	q, err := QuantizeQ8(f32Tensor(t, "w", rows, cols, v))
	if err != nil {
		t.Fatal(err)
	}
	codes, _ := q.QuantCodes()
	s, err := q.QuantScales()
	if err != nil {
		t.Fatal(err)
	}
	dq, _ := q.Float64()
	for i := range rows {
		for g := 0; g*128 < cols; g++ {
			sc := float64(s[i*3+g])
			var amax float64
			for j := g * 128; j < min(cols, g*128+128); j++ {
				amax = max(amax, math.Abs(float64(v[i*cols+j])))
				if e := math.Abs(dq[i*cols+j] - float64(v[i*cols+j])); e > sc/2 || int8(codes[i*cols+j]) == -128 {
					t.Fatalf("[%d, %d]: %g → code %d × %g = %g (err %g > s/2)", i, j, v[i*cols+j], int8(codes[i*cols+j]), sc, dq[i*cols+j], e)
				}
			}
			h := float16.Fromfloat32(float32(sc))
			if sc < amax/127 || h > 0 && float64((h-1).Float32()) >= amax/127 {
				t.Fatalf("row %d group %d: scale %g is not the least f16 ≥ amax/127 = %g", i, g, sc, amax/127)
			}
		}
	}
}

// quantSmall returns smallModel with its projections quantized by scheme (FP8 in 8×8 blocks
// so that its 16- and 24-wide weights have several, some ragged, blocks).
func quantSmall(t *testing.T, scheme QuantScheme) *Model {
	t.Helper()
	m := smallModel(t)
	// smallModel's one BLR projection cannot be quantized: make it dense again.
	up := "model.layers.0.mlp.up_proj.weight"
	dense, err := NewFloatTensor(up, BF16, m.Tensors[up].Shape, make([]float64, m.Tensors[up].NumElements()))
	if err != nil {
		t.Fatal(err)
	}
	m.Tensors[up] = dense
	q, err := QuantizeModel(m, scheme)
	if err != nil {
		t.Fatal(err)
	}
	if scheme == QuantFP8 {
		for n, tt := range q.Tensors {
			if tt.Quant != nil {
				if q.Tensors[n], err = QuantizeFP8(m.Tensors[n], [2]int{8, 8}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := q.Validate(); err != nil {
		t.Fatal(err)
	}
	return q
}

// sameQuant checks that b holds a's tensors, quantized ones with the same scheme, block,
// scale name, dtype, shape and bytes.
func sameQuant(t *testing.T, a, b *Model) {
	t.Helper()
	sameTensors(t, a, b)
	n := 0
	for _, name := range a.Names() {
		x, y := a.Tensors[name], b.Tensors[name]
		if (x.Quant == nil) != (y.Quant == nil) {
			t.Fatalf("%s: quantized %v, read back %v", name, x.Quant != nil, y.Quant != nil)
		}
		if x.Quant == nil {
			continue
		}
		n++
		xs, ys := x.Quant.Scale, y.Quant.Scale
		if x.Quant.Scheme != y.Quant.Scheme || x.Quant.Block != y.Quant.Block || xs.Name != ys.Name || xs.DType != ys.DType || !reflect.DeepEqual(xs.Shape, ys.Shape) {
			t.Fatalf("%s: %+v %s %v, read back %+v %s %v", name, x.Quant, xs.DType, xs.Shape, y.Quant, ys.DType, ys.Shape)
		}
		bx, _ := xs.Bytes()
		by, err := ys.Bytes()
		if err != nil || !bytes.Equal(bx, by) {
			t.Fatalf("%s: scales differ (%v)", name, err)
		}
	}
	if n == 0 {
		t.Fatal("no quantized tensors")
	}
}

// TestQuantCMFRoundTrip writes quantized models as one CMF file and as shards and reads them
// back: the same codes, scales, schemes and blocks; the scales sit as plain entries beside
// their weights, so ParamCounts and Quantization count them.
func TestQuantCMFRoundTrip(t *testing.T) {
	for _, scheme := range []QuantScheme{QuantFP8, QuantQ8} {
		t.Run(string(scheme), func(t *testing.T) {
			q := quantSmall(t, scheme)
			dir := t.TempDir()
			got := roundTrip(t, q, filepath.Join(dir, "q.cmf"))
			sameQuant(t, q, got)
			if err := WriteCMFSharded(filepath.Join(dir, "sh"), q, 600); err != nil {
				t.Fatal(err)
			}
			sh, err := Open(filepath.Join(dir, "sh"))
			if err != nil {
				t.Fatal(err)
			}
			defer sh.Close()
			sameQuant(t, q, sh)
			for _, tt := range sh.Tensors {
				if tt.Quant != nil && tt.File() != tt.Quant.Scale.File() {
					t.Errorf("%s in %s, its scales in %s", tt.Name, tt.File(), tt.Quant.Scale.File())
				}
			}
			sum := got.Quantization()
			if len(sum) != 1 || sum[0].Scheme != scheme || sum[0].Tensors != 15 { // 5 GatedDeltaNet, 4 attention and 2×3 MLP projections
				t.Fatalf("Quantization %+v", sum)
			}
			s := sum[0]
			pc := got.ParamCounts()
			if pc.Bytes[scheme.CodeDType()] != s.CodeBytes+s.ScaleBytes || s.CodeBytes != s.Params {
				t.Errorf("ParamCounts %v, summary %+v", pc.Bytes, s)
			}
			t.Logf("%+v: %.3f bits per weight", s, s.BitsPerWeight())
		})
	}
}

// TestDequantizedView: the dense view's F32 bytes are code value × scale rounded to float32,
// whole or read in small pieces (WriteTo), and the view of a model validates as a dense one.
func TestDequantizedView(t *testing.T) {
	q := quantSmall(t, QuantFP8)
	v := q.Dequantized()
	if err := v.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, n := range q.Names() {
		qt, vt := q.Tensors[n], v.Tensors[n]
		if qt.Quant == nil {
			if vt != qt {
				t.Fatalf("%s: not shared", n)
			}
			continue
		}
		if vt.DType != F32 || vt.Quant != nil {
			t.Fatalf("%s: view is %s", n, vt.DType)
		}
		exact, err := qt.Float64()
		if err != nil {
			t.Fatal(err)
		}
		got := f32s(t, vt)
		for i := range got {
			if got[i] != float32(exact[i]) {
				t.Fatalf("%s[%d] = %g, want f32(%g)", n, i, got[i], exact[i])
			}
		}
		var buf bytes.Buffer
		if _, err := vt.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		whole, _ := vt.Bytes()
		if !bytes.Equal(buf.Bytes(), whole) {
			t.Fatalf("%s: WriteTo differs from Bytes", n)
		}
	}
	if err := ExportHF(t.TempDir(), q, []byte("{}")); err == nil || !strings.Contains(err.Error(), "-quantized: export the model's dense view") {
		t.Errorf("ExportHF of a quantized model: %v", err)
	}
}

// TestQuantCodesRefuseNaN: an FP8 NaN code is refused by QuantCodes, Float64 and the view,
// naming the tensor and element; so is a scale that is not finite by QuantScales, Float64
// and the view.
func TestQuantCodesRefuseNaN(t *testing.T) {
	scale, _ := NewTensor("w_scale_inv", F32, []int{1, 1}, f32Bytes([]float32{0.5}))
	w, err := NewQuantTensor("w", QuantFP8, []int{2, 3}, []byte{0x38, 0, 0, 0, 0xFF, 0}, [2]int{128, 128}, scale)
	if err != nil {
		t.Fatal(err)
	}
	_, e1 := w.QuantCodes()
	_, e2 := w.Float64()
	_, e3 := w.Dequantized().Bytes()
	for _, err := range []error{e1, e2, e3} {
		if err == nil || !strings.Contains(err.Error(), "tensor w: element [1, 1] holds the FP8 NaN code 0xff") {
			t.Errorf("error %v", err)
		}
	}
	inf, _ := NewTensor("w_scale_inv", F32, []int{1, 2}, f32Bytes([]float32{0.5, float32(math.Inf(1))}))
	w, err = NewQuantTensor("w", QuantFP8, []int{2, 3}, make([]byte, 6), [2]int{128, 2}, inf)
	if err != nil {
		t.Fatal(err)
	}
	_, e1 = w.QuantScales()
	_, e2 = w.Float64()
	_, e3 = w.Dequantized().Bytes()
	for _, err := range []error{e1, e2, e3} {
		if err == nil || !strings.Contains(err.Error(), "tensor w_scale_inv: scale [0, 1] is +Inf (not finite)") {
			t.Errorf("error %v", err)
		}
	}
}

// TestNewQuantTensorErrors: inconsistent quantized tensors are refused, naming the tensor.
func TestNewQuantTensorErrors(t *testing.T) {
	sc := func(name string, d DType, shape ...int) *Tensor {
		n := shape[0] * shape[1]
		tt, err := NewTensor(name, d, shape, make([]byte, n*d.Size()))
		if err != nil {
			t.Fatal(err)
		}
		return tt
	}
	for _, c := range []struct {
		scheme QuantScheme
		shape  []int
		block  [2]int
		scale  *Tensor
		want   string
	}{
		{"int4", []int{2, 3}, [2]int{1, 128}, sc("w_scale", F16, 2, 1), `unknown quantization scheme "int4"`},
		{QuantFP8, []int{2, 3}, [2]int{128, 128}, sc("w_scale_inv", F32, 1, 2), "scales of shape [1 2], but weight w [2 3] in blocks of [128 128] needs [1 1]"},
		{QuantFP8, []int{2, 3}, [2]int{128, 128}, sc("w_scale", F32, 1, 1), "named w_scale, want w_scale_inv"},
		{QuantFP8, []int{2, 3}, [2]int{128, 128}, sc("w_scale_inv", F64, 1, 1), "fp8 scales of dtype F64"},
		{QuantQ8, []int{2, 3}, [2]int{2, 128}, sc("w_scale", F16, 1, 1), "a q8 block covers one row"},
		{QuantQ8, []int{2, 3}, [2]int{1, 0}, sc("w_scale", F16, 2, 1), "block [1 0] must be positive"},
		{QuantQ8, []int{6}, [2]int{1, 128}, sc("w_scale", F16, 2, 1), "needs a shape [out, in]"},
		{QuantQ8, []int{2, 3}, [2]int{1, 128}, nil, "without its scales w_scale"},
	} {
		n := 1
		for _, d := range c.shape {
			n *= d
		}
		_, err := NewQuantTensor("w", c.scheme, c.shape, make([]byte, n), c.block, c.scale)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tensor w") {
			t.Errorf("%s %v %v: error %v, want %q", c.scheme, c.shape, c.block, err, c.want)
		}
	}
}

// f32Bytes returns v as little-endian float32 bytes.
func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
