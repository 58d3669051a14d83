package cmf

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/x448/float16"
)

// handPayload is a 1-path BLR payload built byte by byte: m=1, n=8, r=8,
// h=[2], g=[1,2,1,1,1,1,1,0.5], ℓ=[0.5,0.25,0…], U row 0 = 0b00000001 (+1,−1,…),
// V row 0 = 0xFF (all +1), row 1 = 0x0F (+1×4, −1×4), rows 2–7 = 0 (all −1).
// By hand: Ŵ[0][j] = 2·(0.5·1 − 0.25·V1j)·g_j = [0.5, 1, 0.5, 0.5, 1.5, 1.5, 1.5, 0.75].
func handPayload() []byte {
	p := []byte{0x4C, 1, 1, 0, 8, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0}
	p = append(p, 0x00, 0x40)                                                             // h = 2
	p = append(p, 0x00, 0x3C, 0x00, 0x40)                                                 // g0 = 1, g1 = 2
	p = append(p, 0x00, 0x3C, 0x00, 0x3C, 0x00, 0x3C, 0x00, 0x3C, 0x00, 0x3C, 0x00, 0x38) // g2..g6 = 1, g7 = 0.5
	p = append(p, 0x00, 0x38, 0x00, 0x34)                                                 // ℓ0 = 0.5, ℓ1 = 0.25
	p = append(p, make([]byte, 12)...)                                                    // ℓ2..ℓ7 = 0
	p = append(p, 0x01)                                                                   // U
	p = append(p, 0xFF, 0x0F, 0, 0, 0, 0, 0, 0)                                           // V
	return p
}

func TestDecodeBLRHandMade(t *testing.T) {
	p := handPayload()
	if len(p) != 59 || BLRPayloadSize(1, 8, 1, 8) != 59 {
		t.Fatalf("payload %d bytes, BLRPayloadSize %d, want 59", len(p), BLRPayloadSize(1, 8, 1, 8))
	}
	w, err := DecodeBLR(p)
	if err != nil {
		t.Fatal(err)
	}
	if w.M != 1 || w.N != 8 || w.Rank != 8 || len(w.Paths) != 1 {
		t.Fatalf("decoded shape m=%d n=%d r=%d P=%d", w.M, w.N, w.Rank, len(w.Paths))
	}
	q := w.Paths[0]
	if !reflect.DeepEqual(q.H, []float32{2}) || !reflect.DeepEqual(q.G, []float32{1, 2, 1, 1, 1, 1, 1, 0.5}) ||
		!reflect.DeepEqual(q.L, []float32{0.5, 0.25, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("scales h=%v g=%v ℓ=%v", q.H, q.G, q.L)
	}
	want := []float64{0.5, 1, 0.5, 0.5, 1.5, 1.5, 1.5, 0.75}
	if got := w.Dense(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Dense = %v, want %v", got, want)
	}
	// y = Ŵ·x for x = e_1 + 2e_7 → 1 + 2·0.75 = 2.5.
	x := []float64{0, 1, 0, 0, 0, 0, 0, 2}
	if y := w.Apply(x, 1); len(y) != 1 || y[0] != 2.5 {
		t.Fatalf("Apply = %v, want [2.5]", y)
	}
	if bpw := w.BitsPerWeight(); bpw != 8*59.0/8 {
		t.Fatalf("BitsPerWeight = %g, want 59", bpw)
	}
	again, err := EncodeBLR(w)
	if err != nil || !bytes.Equal(again, p) {
		t.Fatalf("re-encode differs: %v\n%x\n%x", err, again, p)
	}
}

// randomBLR returns a valid weight whose scales are exact float16 values.
func randomBLR(rng *rand.Rand, m, n, r, paths int) *BLRWeight {
	f16 := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float16.Fromfloat32(float32(rng.NormFloat64())).Float32()
		}
		return v
	}
	bits := func(k int) []byte {
		b := make([]byte, k)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	w := &BLRWeight{M: m, N: n, Rank: r}
	for p := 0; p < paths; p++ {
		w.Paths = append(w.Paths, BLRPath{H: f16(m), G: f16(n), L: f16(r), U: bits(m * r / 8), V: bits(r * n / 8)})
	}
	return w
}

func TestBLRRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ m, n, r, p int }{{1, 8, 8, 1}, {5, 16, 8, 2}, {37, 24, 16, 1}, {64, 40, 24, 2}} {
		w := randomBLR(rng, c.m, c.n, c.r, c.p)
		b, err := EncodeBLR(w)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != BLRPayloadSize(c.p, c.r, c.m, c.n) {
			t.Fatalf("%+v: %d bytes, want %d", c, len(b), BLRPayloadSize(c.p, c.r, c.m, c.n))
		}
		got, err := DecodeBLR(b)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Fatalf("%+v: decode(encode(w)) != w", c)
		}
		b2, _ := EncodeBLR(got)
		if !bytes.Equal(b, b2) {
			t.Fatalf("%+v: encode(decode(b)) != b", c)
		}
	}
}

func TestEncodeBLRRoundsToF16(t *testing.T) {
	w := &BLRWeight{M: 1, N: 8, Rank: 8, Paths: []BLRPath{{
		H: []float32{1 + 1.0/4096}, // halfway between 1 and 1+2⁻¹⁰: ties to even → 1
		G: make([]float32, 8), L: make([]float32, 8), U: []byte{0}, V: make([]byte, 8)}}}
	b, err := EncodeBLR(w)
	if err != nil {
		t.Fatal(err)
	}
	if h := binary.LittleEndian.Uint16(b[16:]); h != 0x3C00 {
		t.Fatalf("h encoded as 0x%04X, want 0x3C00", h)
	}
}

func TestEncodeBLRValidation(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		name string
		edit func(w *BLRWeight)
		want string
	}{
		{"m zero", func(w *BLRWeight) { w.M = 0 }, "m = 0"},
		{"n not multiple of 8", func(w *BLRWeight) { w.N = 12 }, "n = 12"},
		{"rank not multiple of 8", func(w *BLRWeight) { w.Rank = 4 }, "rank = 4"},
		{"no paths", func(w *BLRWeight) { w.Paths = nil }, "0 paths"},
		{"three paths", func(w *BLRWeight) { w.Paths = append(w.Paths, w.Paths[0], w.Paths[0]) }, "3 paths"},
		{"h short", func(w *BLRWeight) { w.Paths[0].H = w.Paths[0].H[1:] }, "h has 3 values, want 4"},
		{"ℓ long", func(w *BLRWeight) { w.Paths[0].L = append(w.Paths[0].L, 1) }, "ℓ has 9 values, want 8"},
		{"g NaN", func(w *BLRWeight) { w.Paths[0].G[2] = float32(math.NaN()) }, "g[2]"},
		{"h over f16 range", func(w *BLRWeight) { w.Paths[0].H[1] = 70000 }, "h[1] = 70000"},
		{"U size", func(w *BLRWeight) { w.Paths[0].U = w.Paths[0].U[:3] }, "U has 3 bytes, want m·r/8 = 4"},
		{"V size", func(w *BLRWeight) { w.Paths[0].V = nil }, "V has 0 bytes, want r·n/8 = 16"},
	} {
		w := randomBLR(rng, 4, 16, 8, 1)
		c.edit(w)
		_, err := EncodeBLR(w)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestDecodeBLRValidation(t *testing.T) {
	good := handPayload()
	edit := func(f func(p []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	put32 := func(off int, v uint32) func(p []byte) []byte {
		return func(p []byte) []byte { binary.LittleEndian.PutUint32(p[off:], v); return p }
	}
	for _, c := range []struct {
		name    string
		payload []byte
		want    string
	}{
		{"empty", nil, "shorter than the 16-byte header"},
		{"short header", good[:15], "payload of 15 bytes"},
		{"magic", edit(func(p []byte) []byte { p[0] = 0x4D; return p }), "magic byte is 0x4D"},
		{"version", edit(func(p []byte) []byte { p[1] = 2; return p }), "version 2"},
		{"zero paths", edit(func(p []byte) []byte { p[2] = 0; return p }), "number of paths 0"},
		{"three paths", edit(func(p []byte) []byte { p[2] = 3; return p }), "number of paths 3"},
		{"reserved", edit(func(p []byte) []byte { p[3] = 1; return p }), "reserved byte 3 is 1"},
		{"rank 12", edit(put32(4, 12)), "rank 12 is not a positive multiple of 8"},
		{"rank 0", edit(put32(4, 0)), "rank 0"},
		{"m 0", edit(put32(8, 0)), "m is 0"},
		{"n 9", edit(put32(12, 9)), "n 9 is not a positive multiple of 8"},
		{"truncated", good[:58], "payload has 58 bytes but the header (P=1, rank=8, m=1, n=8) needs 59"},
		{"trailing byte", append(append([]byte(nil), good...), 0), "payload has 60 bytes"},
		{"huge sizes", edit(func(p []byte) []byte {
			put32(4, 0xFFFFFFF8)(p)
			put32(8, 0xFFFFFFFF)(p)
			return put32(12, 0xFFFFFFF8)(p)
		}), "payload has 59 bytes but the header"},
		{"two paths, one present", edit(func(p []byte) []byte { p[2] = 2; return p }), "needs 102"},
		{"h infinite", edit(func(p []byte) []byte { p[16], p[17] = 0x00, 0x7C; return p }), "path 0: h[0] is not finite"},
		{"ℓ NaN", edit(func(p []byte) []byte { p[34+4], p[34+5] = 0x01, 0x7E; return p }), "path 0: ℓ[2] is not finite"},
	} {
		w, err := DecodeBLR(c.payload)
		if err == nil || w != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: (%v, %v), want an error containing %q", c.name, w != nil, err, c.want)
		}
	}
}

// naiveDense is the f64 reference Ŵ[i][j] = Σ_p Σ_k h_i·U_ik·ℓ_k·V_kj·g_j, read straight from
// the bit layout of DESIGN.md §4.
func naiveDense(w *BLRWeight) []float64 {
	sign := func(bits []byte, stride, row, col int) float64 {
		if bits[row*stride+col/8]>>(col%8)&1 == 1 {
			return 1
		}
		return -1
	}
	out := make([]float64, w.M*w.N)
	for _, q := range w.Paths {
		for i := 0; i < w.M; i++ {
			for j := 0; j < w.N; j++ {
				var s float64
				for k := 0; k < w.Rank; k++ {
					s += sign(q.U, w.Rank/8, i, k) * float64(q.L[k]) * sign(q.V, w.N/8, k, j)
				}
				out[i*w.N+j] += float64(q.H[i]) * s * float64(q.G[j])
			}
		}
	}
	return out
}

func TestBLRDenseAndApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ m, n, r, p, rows int }{{3, 8, 8, 1, 1}, {19, 32, 16, 2, 7}, {40, 24, 32, 2, 0}, {8, 64, 8, 1, 33}} {
		w := randomBLR(rng, c.m, c.n, c.r, c.p)
		ref := naiveDense(w)
		d := w.Dense()
		for i := range ref {
			if math.Abs(d[i]-ref[i]) > 1e-12*(1+math.Abs(ref[i])) {
				t.Fatalf("%+v: Dense[%d] = %g, want %g", c, i, d[i], ref[i])
			}
		}
		x := make([]float64, c.rows*c.n)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		y := w.Apply(x, c.rows)
		if len(y) != c.rows*c.m {
			t.Fatalf("%+v: len(y) = %d", c, len(y))
		}
		for r := 0; r < c.rows; r++ {
			for i := 0; i < c.m; i++ {
				var s, mag float64
				for j := 0; j < c.n; j++ {
					s += ref[i*c.n+j] * x[r*c.n+j]
					mag += math.Abs(ref[i*c.n+j] * x[r*c.n+j])
				}
				if got := y[r*c.m+i]; math.Abs(got-s) > 1e-12*(1+mag)*float64(c.r) {
					t.Fatalf("%+v: y[%d][%d] = %g, want %g", c, r, i, got, s)
				}
			}
		}
	}
}

func TestBLRApplyBadShapePanicsClearly(t *testing.T) {
	w := randomBLR(rand.New(rand.NewPCG(7, 8)), 4, 16, 8, 1)
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "len(x) = 15, want rows·n = 1·16") {
			t.Fatalf("recovered %v", r)
		}
	}()
	w.Apply(make([]float64, 15), 1)
}

func TestBLRBitsPerWeight(t *testing.T) {
	// 1024×3584 at rank 792, one path: 16 + 2·1024 + 2·3584 + 2·792 + 1024·99 + 792·448 bytes.
	want := 8 * float64(16+2*1024+2*3584+2*792+1024*99+792*448) / (1024 * 3584)
	if got := BLRBitsPerWeight(1, 792, 1024, 3584); got != want {
		t.Fatalf("BLRBitsPerWeight = %g, want %g", got, want)
	}
}

func TestBLRFromTensor(t *testing.T) {
	p := handPayload()
	tn, _ := NewTensor("x.weight", BLR, []int{1, 8}, p)
	if w, err := BLRFromTensor(tn); err != nil || w.M != 1 {
		t.Fatal(w, err)
	}
	tn, _ = NewTensor("x.weight", BLR, []int{2, 8}, p)
	if _, err := BLRFromTensor(tn); err == nil || !strings.Contains(err.Error(), "tensor x.weight: BLR payload is 1×8 but the tensor's shape is [2 8]") {
		t.Fatal(err)
	}
	tn, _ = NewTensor("y.weight", F32, []int{2}, make([]byte, 8))
	if _, err := BLRFromTensor(tn); err == nil || !strings.Contains(err.Error(), "y.weight") {
		t.Fatal(err)
	}
}

// FuzzDecodeBLR checks that DecodeBLR never panics nor allocates beyond allocBound of the
// payload's size (the header's rank and dims are checked against the length first), and that whatever it accepts
// re-encodes to exactly the same bytes (the format has one encoding per weight).
func FuzzDecodeBLR(f *testing.F) {
	f.Add(handPayload())
	w := randomBLR(rand.New(rand.NewPCG(9, 9)), 3, 16, 8, 2)
	b, _ := EncodeBLR(w)
	f.Add(b)
	f.Add([]byte{0x4C, 1, 1, 0})
	f.Fuzz(func(t *testing.T, payload []byte) {
		before := totalAlloc()
		w, err := DecodeBLR(payload)
		checkAlloc(t, before, len(payload), 0)
		if err != nil {
			if w != nil {
				t.Fatal("non-nil weight with an error")
			}
			return
		}
		again, err := EncodeBLR(w)
		if err != nil {
			t.Fatalf("accepted payload does not re-encode: %v", err)
		}
		if !bytes.Equal(again, payload) {
			t.Fatal("re-encoded payload differs")
		}
		if bpw := w.BitsPerWeight(); bpw != 8*float64(len(payload))/(float64(w.M)*float64(w.N)) {
			t.Fatalf("BitsPerWeight %g", bpw)
		}
	})
}
