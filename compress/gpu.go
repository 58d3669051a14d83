package compress

import (
	"errors"
	"fmt"
	"sync"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
)

// GPUProducts are Products on a WebGPU device: the large products of the compressor
// (the randomised SVD's sketch Y = W·Ω, the power iterations' W·Z and Wᵀ·Q, the projection
// Wᵀ·Q, U = Q·U_B, and each BLR path's reconstruction) run as gpu.MatMul in float32
// (products and sums in f32, in K order), while the small dense parts (QR, the ℓ×n SVD,
// the Dual-SVID sign and rank-1 steps) stay on the CPU in float64. Bind
// uploads W once as f32, in row blocks small enough for one storage binding each
// (maxStorageBufferBindingSize: 128 MiB on lavapipe, 2 GiB on the H200); every product
// uploads its small operand, runs one MatMul per block and reads the small result back
// (Wᵀ·X sums the blocks' partial products on the host, in block order, in float64).
//
// Results are deterministic for a given device and differ from CPUProducts' float64 ones by
// f32 rounding (relative ~1e-6 per product); see Options.Products for what that
// means for the compressed model. GPUProducts serialise their use of the device, so one
// value may serve all of Model's workers (the CPU parts of other tensors overlap with
// the GPU products), but nothing else may drive the same device meanwhile (gpu.Device is
// driven by one goroutine at a time).
type GPUProducts struct {
	d  *gpu.Device
	mu sync.Mutex
	// maxBlockRows, when positive, caps the rows of a block (tests).
	maxBlockRows int
}

// NewGPUProducts returns the products on d. Errors: a nil device.
func NewGPUProducts(d *gpu.Device) (*GPUProducts, error) {
	if d == nil {
		return nil, errors.New("compress.NewGPUProducts: nil device")
	}
	return &GPUProducts{d: d}, nil
}

// bindingLimit is the largest buffer one storage binding may cover on the device.
func (g *GPUProducts) bindingLimit() uint64 {
	info := g.d.Info()
	lim := info.MaxStorageBindingSize
	if info.MaxBufferSize > 0 && info.MaxBufferSize < lim {
		lim = info.MaxBufferSize
	}
	return lim
}

// Bind uploads the row-major m×n matrix w to the device as f32 row blocks (see
// Products.Bind). Errors: len(w) ≠ m·n, m or n < 1, a single row larger than a storage
// binding, an entry beyond the float32 range, or an upload failure (out of device memory).
func (g *GPUProducts) Bind(w []float64, m, n int) (BoundProducts, error) {
	if g == nil || g.d == nil {
		return nil, errors.New("gpu products: nil device (use NewGPUProducts)")
	}
	if m < 1 || n < 1 || len(w) != m*n {
		return nil, fmt.Errorf("gpu products: %d values for a %d×%d matrix", len(w), m, n)
	}
	rows := int(g.bindingLimit() / (4 * uint64(n)))
	if rows < 1 {
		return nil, fmt.Errorf("gpu products: a row of %d f32 values exceeds the device's storage binding limit of %d bytes", n, g.bindingLimit())
	}
	if g.maxBlockRows > 0 {
		rows = min(rows, g.maxBlockRows)
	}
	rows = min(rows, m)
	b := &gpuBound{g: g, m: m, n: n}
	buf := make([]float32, rows*n)
	g.mu.Lock()
	defer g.mu.Unlock()
	for r0 := 0; r0 < m; r0 += rows {
		rb := min(rows, m-r0)
		for i, x := range w[r0*n : (r0+rb)*n] {
			f := float32(x)
			if f-f != 0 {
				b.release()
				return nil, fmt.Errorf("gpu products: entry (%d, %d) = %g is beyond the float32 range", r0+i/n, i%n, x)
			}
			buf[i] = f
		}
		wb, err := g.d.UploadFloat32(fmt.Sprintf("svd.w[%d:%d]", r0, r0+rb), buf[:rb*n], rb, n)
		if err != nil {
			b.release()
			return nil, fmt.Errorf("gpu products: upload %d×%d: %w", m, n, err)
		}
		b.blocks = append(b.blocks, wb)
		b.start = append(b.start, r0)
	}
	return b, nil
}

// Mul sets dst = a·b on the device (see Products.Mul): b (k×n) is uploaded once, a in
// row blocks that, like their products, fit one storage binding; one MatMul per block.
// Errors: bad sizes or lengths, b larger than one binding, or the device's.
func (g *GPUProducts) Mul(dst, a, b []float64, m, k, n int) error {
	if g == nil || g.d == nil {
		return errors.New("gpu products: nil device (use NewGPUProducts)")
	}
	if m < 1 || k < 1 || n < 1 {
		return fmt.Errorf("gpu products: Mul of sizes %d, %d, %d", m, k, n)
	}
	if len(a) != m*k || len(b) != k*n || len(dst) != m*n {
		return fmt.Errorf("gpu products: Mul: a has %d values (want %d×%d), b %d (want %d×%d), dst %d (want %d×%d)", len(a), m, k, len(b), k, n, len(dst), m, n)
	}
	lim := g.bindingLimit()
	if 4*uint64(k)*uint64(n) > lim {
		return fmt.Errorf("gpu products: Mul: the %d×%d right operand exceeds the device's storage binding limit of %d bytes", k, n, lim)
	}
	rows := int(lim / (4 * uint64(max(k, n))))
	if g.maxBlockRows > 0 {
		rows = min(rows, g.maxBlockRows)
	}
	rows = min(rows, m)
	g.mu.Lock()
	defer g.mu.Unlock()
	bb, err := g.d.UploadFloat32("mul.b", toF32(make([]float32, len(b)), b), k, n)
	if err != nil {
		return fmt.Errorf("gpu products: Mul: %w", err)
	}
	defer bb.Release()
	a32 := make([]float32, rows*k)
	for r0 := 0; r0 < m; r0 += rows {
		rb := min(rows, m-r0)
		ab, err := g.d.UploadFloat32("mul.a", toF32(a32[:rb*k], a[r0*k:(r0+rb)*k]), rb, k)
		if err != nil {
			return fmt.Errorf("gpu products: Mul: %w", err)
		}
		cb, err := g.d.NewBuffer("mul.c", gpu.F32, rb, n)
		if err != nil {
			ab.Release()
			return fmt.Errorf("gpu products: Mul: %w", err)
		}
		err = g.d.Run(func(r *gpu.Recorder) error { return gpu.MatMul(r, ab, bb, cb, rb, k, n, false) })
		var c []float32
		if err == nil {
			c, err = g.d.ReadFloat32(cb)
		}
		ab.Release()
		cb.Release()
		if err != nil {
			return fmt.Errorf("gpu products: Mul: %w", err)
		}
		for i, v := range c {
			dst[r0*n+i] = float64(v)
		}
	}
	return nil
}

// gpuBound is W on the device: blocks[i] holds rows start[i] … start[i+1]−1 (f32).
type gpuBound struct {
	g      *GPUProducts
	m, n   int
	blocks []*gpu.Buffer
	start  []int
}

func (b *gpuBound) rows(i int) int {
	if i+1 < len(b.start) {
		return b.start[i+1] - b.start[i]
	}
	return b.m - b.start[i]
}

func (b *gpuBound) check(op string, dst, x []float64, inner, out, l int) error {
	if b.blocks == nil {
		return fmt.Errorf("gpu products: %s after Close", op)
	}
	if l < 1 {
		return fmt.Errorf("gpu products: %s with %d columns", op, l)
	}
	if len(x) != inner*l || len(dst) != out*l {
		return fmt.Errorf("gpu products: %s: x has %d values (want %d×%d), dst %d (want %d×%d)", op, len(x), inner, l, len(dst), out, l)
	}
	// The largest bindings: x or dst (n×l, m-block×l, l×n).
	lim := b.g.bindingLimit()
	if 4*uint64(max(b.n, b.rows(0)))*uint64(l) > lim {
		return fmt.Errorf("gpu products: %s: a %d×%d operand exceeds the device's storage binding limit of %d bytes", op, max(b.n, b.rows(0)), l, lim)
	}
	return nil
}

func toF32(dst []float32, x []float64) []float32 {
	for i, v := range x {
		dst[i] = float32(v)
	}
	return dst
}

// MulW sets dst = W·x (x n×l, dst m×l): x is uploaded once, one MatMul per row block.
func (b *gpuBound) MulW(dst, x []float64, l int) error {
	if err := b.check("MulW", dst, x, b.n, b.m, l); err != nil {
		return err
	}
	g := b.g
	g.mu.Lock()
	defer g.mu.Unlock()
	xb, err := g.d.UploadFloat32("svd.x", toF32(make([]float32, len(x)), x), b.n, l)
	if err != nil {
		return fmt.Errorf("gpu products: MulW: %w", err)
	}
	defer xb.Release()
	for i, wb := range b.blocks {
		rb := b.rows(i)
		yb, err := g.d.NewBuffer("svd.y", gpu.F32, rb, l)
		if err != nil {
			return fmt.Errorf("gpu products: MulW: %w", err)
		}
		err = g.d.Run(func(r *gpu.Recorder) error { return gpu.MatMul(r, wb, xb, yb, rb, b.n, l, false) })
		var y []float32
		if err == nil {
			y, err = g.d.ReadFloat32(yb)
		}
		yb.Release()
		if err != nil {
			return fmt.Errorf("gpu products: MulW: %w", err)
		}
		out := dst[b.start[i]*l : (b.start[i]+rb)*l]
		for j, v := range y {
			out[j] = float64(v)
		}
	}
	return nil
}

// MulWT sets dst = Wᵀ·x (x m×l, dst n×l): per row block, (x_blockᵀ·W_block)ᵀ, summed.
func (b *gpuBound) MulWT(dst, x []float64, l int) error {
	if err := b.check("MulWT", dst, x, b.m, b.n, l); err != nil {
		return err
	}
	g := b.g
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(dst)
	n := b.n
	xt := make([]float32, b.rows(0)*l)
	for i, wb := range b.blocks {
		rb, r0 := b.rows(i), b.start[i]
		for r := 0; r < rb; r++ { // x_blockᵀ: l×rb
			for c, v := range x[(r0+r)*l : (r0+r+1)*l] {
				xt[c*rb+r] = float32(v)
			}
		}
		xb, err := g.d.UploadFloat32("svd.xt", xt[:rb*l], l, rb)
		if err != nil {
			return fmt.Errorf("gpu products: MulWT: %w", err)
		}
		zb, err := g.d.NewBuffer("svd.zt", gpu.F32, l, n)
		if err != nil {
			xb.Release()
			return fmt.Errorf("gpu products: MulWT: %w", err)
		}
		err = g.d.Run(func(r *gpu.Recorder) error { return gpu.MatMul(r, xb, wb, zb, l, rb, n, false) })
		var zt []float32
		if err == nil {
			zt, err = g.d.ReadFloat32(zb)
		}
		xb.Release()
		zb.Release()
		if err != nil {
			return fmt.Errorf("gpu products: MulWT: %w", err)
		}
		for c := 0; c < l; c++ {
			for j, v := range zt[c*n : (c+1)*n] {
				dst[j*l+c] += float64(v)
			}
		}
	}
	return nil
}

// Close releases W's blocks; later products are errors.
func (b *gpuBound) Close() error {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	b.release()
	return nil
}

func (b *gpuBound) release() {
	for _, wb := range b.blocks {
		wb.Release()
	}
	b.blocks = nil
}

// ModelOn is Model with the randomised SVDs' large products on the device d (GPUProducts)
// when d is non-nil, and as opt.Products says (default CPUProducts{}: gonum, float64) when d
// is nil; progress may be nil. In a notebook: student, reports, err :=
// compress.ModelOn(dev, teacher, compress.Options{}, nil). The student is deterministic for
// a given opt.Seed and device; against the CPU path it has the same ranks and bits per
// weight, and relative errors that agree to well within 1e-3 (Options.Products). Errors:
// those of Model, or both d and opt.Products set.
func ModelOn(d *gpu.Device, teacher *cmf.Model, opt Options, progress func(done, total int, name string)) (*cmf.Model, []TensorReport, error) {
	if d != nil {
		if opt.Products != nil {
			return nil, nil, errors.New("compress.ModelOn: both a device and opt.Products given")
		}
		p, err := NewGPUProducts(d)
		if err != nil {
			return nil, nil, err
		}
		opt.Products = p
	}
	return Model(teacher, opt, progress)
}
