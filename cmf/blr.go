package cmf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/x448/float16"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// BLR payload constants (DESIGN.md §4).
const (
	BLRMagic      = 0x4C // byte 0 of a BLR payload
	BLRVersion    = 1    // byte 1 of a BLR payload
	BLRHeaderSize = 16   // bytes before the first path
	// BLRMaxPaths is the largest number of paths P a payload may hold.
	BLRMaxPaths = 2
	// F16Max is the largest finite float16 value (the bound of every BLR scale).
	F16Max = 65504
)

// BLRPath is one path of a binary low-rank weight: the m×n matrix
// diag(H)·U·diag(L)·V·diag(G) with U ∈ {±1}^{m×r} and V ∈ {±1}^{r×n} (DESIGN.md §4).
//
// The scales hold float16 values widened to float32 (EncodeBLR rounds them to float16,
// nearest even). The sign matrices are packed bit rows, row-major: bit b of byte k of a row
// is element 8k+b, a 1 bit is +1 and a 0 bit is −1.
type BLRPath struct {
	H []float32 // [m] output scales
	G []float32 // [n] input scales
	L []float32 // [r] rank scales
	U []byte    // [m][r/8] sign bits of the m×r left factor
	V []byte    // [r][n/8] sign bits of the r×n right factor
}

// BLRWeight is a binary low-rank weight W ≈ Σ_p diag(h_p)·U_p·diag(ℓ_p)·V_p·diag(g_p) of
// M output and N input features (a linear layer computes y = W·x). Rank and N are
// multiples of 8; every path has the same Rank. It is the decoded form of a BLR payload
// (DESIGN.md §4); EncodeBLR and DecodeBLR convert between the two.
type BLRWeight struct {
	M, N, Rank int
	Paths      []BLRPath
}

// BLRPayloadSize is the length in bytes of a BLR payload with the given number of paths,
// rank r, m output and n input features:
// 16 + paths·(2m + 2n + 2r + m·r/8 + r·n/8). r and n must be multiples of 8.
func BLRPayloadSize(paths, r, m, n int) int {
	return BLRHeaderSize + paths*(2*m+2*n+2*r+m*(r/8)+r*(n/8))
}

// BLRBitsPerWeight is 8·BLRPayloadSize(paths, r, m, n)/(m·n), the bits per weight of such
// a payload (DESIGN.md §4).
func BLRBitsPerWeight(paths, r, m, n int) float64 {
	return 8 * float64(BLRPayloadSize(paths, r, m, n)) / (float64(m) * float64(n))
}

// PayloadSize is the length in bytes of w's BLR payload (see BLRPayloadSize).
func (w *BLRWeight) PayloadSize() int { return BLRPayloadSize(len(w.Paths), w.Rank, w.M, w.N) }

// BitsPerWeight is 8·len(payload)/(M·N), the storage cost of w in bits per weight.
func (w *BLRWeight) BitsPerWeight() float64 {
	return BLRBitsPerWeight(len(w.Paths), w.Rank, w.M, w.N)
}

// Validate checks that w can be encoded: M ≥ 1; N and Rank positive multiples of 8, each at
// most 2³²−1; 1 or 2 paths; every slice of every path of the length its shape needs; every
// scale finite and within the float16 range (|x| ≤ 65504). The error names the field.
func (w *BLRWeight) Validate() error {
	switch {
	case w == nil:
		return fmt.Errorf("BLR: nil weight")
	case w.M < 1 || int64(w.M) > math.MaxUint32:
		return fmt.Errorf("BLR: m = %d must be in [1, 2³²)", w.M)
	case w.N < 8 || w.N%8 != 0 || int64(w.N) > math.MaxUint32:
		return fmt.Errorf("BLR: n = %d must be a positive multiple of 8 below 2³²", w.N)
	case w.Rank < 8 || w.Rank%8 != 0 || int64(w.Rank) > math.MaxUint32:
		return fmt.Errorf("BLR: rank = %d must be a positive multiple of 8 below 2³²", w.Rank)
	case len(w.Paths) < 1 || len(w.Paths) > BLRMaxPaths:
		return fmt.Errorf("BLR: %d paths, want 1 or 2", len(w.Paths))
	}
	for p := range w.Paths {
		q := &w.Paths[p]
		for _, f := range []struct {
			name string
			v    []float32
			want int
		}{{"h", q.H, w.M}, {"g", q.G, w.N}, {"ℓ", q.L, w.Rank}} {
			if len(f.v) != f.want {
				return fmt.Errorf("BLR: path %d: %s has %d values, want %d", p, f.name, len(f.v), f.want)
			}
			for i, x := range f.v {
				if !(math.Abs(float64(x)) <= F16Max) {
					return fmt.Errorf("BLR: path %d: %s[%d] = %g is not a finite float16 value", p, f.name, i, x)
				}
			}
		}
		if len(q.U) != w.M*(w.Rank/8) {
			return fmt.Errorf("BLR: path %d: U has %d bytes, want m·r/8 = %d", p, len(q.U), w.M*(w.Rank/8))
		}
		if len(q.V) != w.Rank*(w.N/8) {
			return fmt.Errorf("BLR: path %d: V has %d bytes, want r·n/8 = %d", p, len(q.V), w.Rank*(w.N/8))
		}
	}
	return nil
}

// EncodeBLR serialises w as a BLR payload (DESIGN.md §4): the 16-byte header (0x4C,
// version 1, P, 0, u32 rank, u32 m, u32 n, little-endian), then per path h f16[m], g f16[n],
// ℓ f16[r], U bits [m][r/8], V bits [r][n/8]. Scales are rounded to float16 (nearest even).
// It returns Validate's error for a malformed w.
func EncodeBLR(w *BLRWeight) ([]byte, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	out := make([]byte, w.PayloadSize())
	out[0], out[1], out[2], out[3] = BLRMagic, BLRVersion, byte(len(w.Paths)), 0
	binary.LittleEndian.PutUint32(out[4:], uint32(w.Rank))
	binary.LittleEndian.PutUint32(out[8:], uint32(w.M))
	binary.LittleEndian.PutUint32(out[12:], uint32(w.N))
	o := BLRHeaderSize
	putF16 := func(v []float32) {
		for _, x := range v {
			binary.LittleEndian.PutUint16(out[o:], float16.Fromfloat32(x).Bits())
			o += 2
		}
	}
	for p := range w.Paths {
		q := &w.Paths[p]
		putF16(q.H)
		putF16(q.G)
		putF16(q.L)
		o += copy(out[o:], q.U)
		o += copy(out[o:], q.V)
	}
	return out, nil
}

// DecodeBLR parses and validates a BLR payload (DESIGN.md §4). It checks, in this order,
// that the payload holds a 16-byte header, the magic byte 0x4C, version 1, P ∈ {1, 2}, a
// zero byte 3, m ≥ 1, rank and n positive multiples of 8, that len(payload) equals
// 16 + P·(2m + 2n + 2r + m·r/8 + r·n/8) exactly, and that every scale is a finite float16.
// The error names what is wrong. The sizes are checked against len(payload) before
// anything is allocated, so the result takes O(len(payload)) memory whatever the header
// says. The result does not alias payload.
func DecodeBLR(payload []byte) (*BLRWeight, error) {
	if len(payload) < BLRHeaderSize {
		return nil, fmt.Errorf("BLR: payload of %d bytes is shorter than the %d-byte header", len(payload), BLRHeaderSize)
	}
	if payload[0] != BLRMagic {
		return nil, fmt.Errorf("BLR: magic byte is 0x%02X, want 0x%02X", payload[0], BLRMagic)
	}
	if payload[1] != BLRVersion {
		return nil, fmt.Errorf("BLR: version %d is not supported (want %d)", payload[1], BLRVersion)
	}
	paths := int(payload[2])
	if paths < 1 || paths > BLRMaxPaths {
		return nil, fmt.Errorf("BLR: number of paths %d, want 1 or 2", paths)
	}
	if payload[3] != 0 {
		return nil, fmt.Errorf("BLR: reserved byte 3 is %d, want 0", payload[3])
	}
	r64 := uint64(binary.LittleEndian.Uint32(payload[4:]))
	m64 := uint64(binary.LittleEndian.Uint32(payload[8:]))
	n64 := uint64(binary.LittleEndian.Uint32(payload[12:]))
	if m64 == 0 {
		return nil, fmt.Errorf("BLR: m is 0")
	}
	if r64 == 0 || r64%8 != 0 {
		return nil, fmt.Errorf("BLR: rank %d is not a positive multiple of 8", r64)
	}
	if n64 == 0 || n64%8 != 0 {
		return nil, fmt.Errorf("BLR: n %d is not a positive multiple of 8", n64)
	}
	// Each of m, n, r < 2³², so every term below is < 2⁶⁴/4 and the sum cannot overflow.
	per := 2*m64 + 2*n64 + 2*r64 + m64*(r64/8) + r64*(n64/8)
	want := uint64(BLRHeaderSize) + uint64(paths)*per
	if want != uint64(len(payload)) {
		return nil, fmt.Errorf("BLR: payload has %d bytes but the header (P=%d, rank=%d, m=%d, n=%d) needs %d", len(payload), paths, r64, m64, n64, want)
	}
	m, n, r := int(m64), int(n64), int(r64)
	w := &BLRWeight{M: m, N: n, Rank: r, Paths: make([]BLRPath, paths)}
	o := BLRHeaderSize
	getF16 := func(p int, name string, k int) ([]float32, error) {
		v := make([]float32, k)
		for i := range v {
			f := float16.Frombits(binary.LittleEndian.Uint16(payload[o:]))
			if f.IsNaN() || f.IsInf(0) {
				return nil, fmt.Errorf("BLR: path %d: %s[%d] is not finite (f16 bits 0x%04X)", p, name, i, f.Bits())
			}
			v[i] = f.Float32()
			o += 2
		}
		return v, nil
	}
	var err error
	for p := range w.Paths {
		q := &w.Paths[p]
		if q.H, err = getF16(p, "h", m); err != nil {
			return nil, err
		}
		if q.G, err = getF16(p, "g", n); err != nil {
			return nil, err
		}
		if q.L, err = getF16(p, "ℓ", r); err != nil {
			return nil, err
		}
		q.U = append([]byte(nil), payload[o:o+m*(r/8)]...)
		o += m * (r / 8)
		q.V = append([]byte(nil), payload[o:o+r*(n/8)]...)
		o += r * (n / 8)
	}
	return w, nil
}

// unpackSigns expands rows×cols packed sign bits (row stride cols/8 bytes, bit b of byte k
// is column 8k+b, 1 ↦ +1, 0 ↦ −1) into a row-major rows×cols matrix of ±1.
func unpackSigns(bits []byte, rows, cols int) []float64 {
	out := make([]float64, rows*cols)
	for i, byt := range bits {
		base := i * 8
		for b := 0; b < 8; b++ {
			if byt>>b&1 != 0 {
				out[base+b] = 1
			} else {
				out[base+b] = -1
			}
		}
	}
	return out
}

// PackSigns packs a row-major rows×cols matrix (cols a multiple of 8) into sign bits:
// a value ≥ 0 (and +0, −0) becomes a 1 bit (+1), a negative value a 0 bit (−1), in the
// layout of BLRPath.U and BLRPath.V. len(v) must be rows·cols.
func PackSigns(v []float64, rows, cols int) []byte {
	out := make([]byte, rows*cols/8)
	for i := range out {
		var byt byte
		for b := 0; b < 8; b++ {
			if !(v[i*8+b] < 0) {
				byt |= 1 << b
			}
		}
		out[i] = byt
	}
	return out
}

// PathFactors returns path p's factors as dense row-major f64 matrices:
// left = diag(h)·U·diag(ℓ) (m×r) and right = V·diag(g) (r×n), so the path is left·right
// (each entry a ±1 sign times the float16 scales, exactly). w must be valid (Validate) and
// 0 ≤ p < len(w.Paths).
func (w *BLRWeight) PathFactors(p int) (left, right []float64) {
	q := &w.Paths[p]
	left = unpackSigns(q.U, w.M, w.Rank)
	for i := 0; i < w.M; i++ {
		h := float64(q.H[i])
		row := left[i*w.Rank : (i+1)*w.Rank]
		for k := range row {
			row[k] *= h * float64(q.L[k])
		}
	}
	right = unpackSigns(q.V, w.Rank, w.N)
	for k := 0; k < w.Rank; k++ {
		row := right[k*w.N : (k+1)*w.N]
		for j := range row {
			row[j] *= float64(q.G[j])
		}
	}
	return left, right
}

// Dense returns the reconstruction Ŵ = Σ_p diag(h_p)·U_p·diag(ℓ_p)·V_p·diag(g_p) as a
// row-major M×N f64 matrix (M·N values; for tests and error measurement, not for inference).
// w must be valid (see Validate); Dense panics with a message naming the mismatch otherwise.
func (w *BLRWeight) Dense() []float64 {
	if err := w.Validate(); err != nil {
		panic(err)
	}
	out := make([]float64, w.M*w.N)
	c := blas64.General{Rows: w.M, Cols: w.N, Stride: w.N, Data: out}
	for p := range w.Paths {
		left, right := w.PathFactors(p)
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1,
			blas64.General{Rows: w.M, Cols: w.Rank, Stride: w.Rank, Data: left},
			blas64.General{Rows: w.Rank, Cols: w.N, Stride: w.N, Data: right}, 1, c)
	}
	return out
}

// Apply computes y = x·Ŵᵀ for rows input rows, i.e. per row y = Σ_p h_p ⊙ U_p(ℓ_p ⊙ V_p(g_p ⊙ x)),
// the f64 host reference of a BLR linear layer. x is row-major rows×N, the result row-major
// rows×M. It never forms Ŵ: per path it does two skinny products, (x⊙g)·Vᵀ (rows×r) and
// (·⊙ℓ)·Uᵀ (rows×M), in O(rows·r·(M+N)) operations. w must be valid (see Validate) and
// len(x) must equal rows·N; Apply panics with a message naming the mismatch otherwise
// (the host Linear interface has no error result).
func (w *BLRWeight) Apply(x []float64, rows int) []float64 {
	if err := w.Validate(); err != nil {
		panic(err)
	}
	if rows < 0 || len(x) != rows*w.N {
		panic(fmt.Sprintf("BLR: Apply: len(x) = %d, want rows·n = %d·%d", len(x), rows, w.N))
	}
	y := make([]float64, rows*w.M)
	if rows == 0 {
		return y
	}
	xg := make([]float64, rows*w.N)
	t := make([]float64, rows*w.Rank)
	for p := range w.Paths {
		q := &w.Paths[p]
		for i := 0; i < rows; i++ {
			for j := 0; j < w.N; j++ {
				xg[i*w.N+j] = x[i*w.N+j] * float64(q.G[j])
			}
		}
		v := unpackSigns(q.V, w.Rank, w.N)
		// t = (x⊙g)·Vᵀ  (rows×r)
		blas64.Gemm(blas.NoTrans, blas.Trans, 1,
			blas64.General{Rows: rows, Cols: w.N, Stride: w.N, Data: xg},
			blas64.General{Rows: w.Rank, Cols: w.N, Stride: w.N, Data: v}, 0,
			blas64.General{Rows: rows, Cols: w.Rank, Stride: w.Rank, Data: t})
		for i := 0; i < rows; i++ {
			for k := 0; k < w.Rank; k++ {
				t[i*w.Rank+k] *= float64(q.L[k])
			}
		}
		// U with h folded in: (diag(h)·U) is m×r; y += t·(diag(h)·U)ᵀ.
		u := unpackSigns(q.U, w.M, w.Rank)
		for i := 0; i < w.M; i++ {
			h := float64(q.H[i])
			for k := 0; k < w.Rank; k++ {
				u[i*w.Rank+k] *= h
			}
		}
		blas64.Gemm(blas.NoTrans, blas.Trans, 1,
			blas64.General{Rows: rows, Cols: w.Rank, Stride: w.Rank, Data: t},
			blas64.General{Rows: w.M, Cols: w.Rank, Stride: w.Rank, Data: u}, 1,
			blas64.General{Rows: rows, Cols: w.M, Stride: w.M, Data: y})
	}
	return y
}

// BLRFromTensor decodes the payload of a tensor of dtype BLR and checks that the payload's
// m and n agree with the tensor's logical shape [m, n]. Errors name the tensor.
func BLRFromTensor(t *Tensor) (*BLRWeight, error) {
	if t == nil {
		return nil, fmt.Errorf("BLR: nil tensor")
	}
	if t.DType != BLR {
		return nil, fmt.Errorf("tensor %s: dtype %s is not %s", t.Name, t.DType, BLR)
	}
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("tensor %s: BLR shape %v is not [m, n]", t.Name, t.Shape)
	}
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	w, err := DecodeBLR(b)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	if w.M != t.Shape[0] || w.N != t.Shape[1] {
		return nil, fmt.Errorf("tensor %s: BLR payload is %d×%d but the tensor's shape is %v", t.Name, w.M, w.N, t.Shape)
	}
	return w, nil
}
