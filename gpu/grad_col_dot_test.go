package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// colDotCase is one call of the column reductions: rows × n operands, and which optional
// parts it has.
type colDotCase struct {
	rows, n   int
	rowScale  bool // rs
	mask      bool
	side      bool // so = a ⊙ s (pairs: a0 ⊙ s0 + a1 ⊙ s1)
	sideAccum bool
	pair      bool // gradColDot2
	sharedA   bool
}

// TestGradColDot checks each form of the column reductions (the window form over uniform
// views, CPU adapters only; stages "dot4" and "dot"; a form that does not apply falls back to
// the next) against the float64 host sums, on shapes that take one window, several windows
// per dispatch, a partial last dispatch, a last view not on a 32-byte boundary of the rows,
// an n that is not a multiple of 4 (stage "dot" only), one chunk and many (2,000 rows: 63
// chunks of 32, more than reduce4's 16 lanes), and a partial last column block. Each output
// starts nonzero: the kernels add to it.
func TestGradColDot(t *testing.T) {
	d := gputest.Open(t)
	shapes := [][2]int{{1, 4}, {5, 12}, {37, 128}, {512, 128}, {256, 768}, {301, 1004}, {7, 10}, {2000, 8}, {700, 260}}
	var cases []colDotCase
	for _, s := range shapes {
		rows, n := s[0], s[1]
		cases = append(cases,
			colDotCase{rows: rows, n: n},
			colDotCase{rows: rows, n: n, rowScale: true},
			colDotCase{rows: rows, n: n, mask: true},
			colDotCase{rows: rows, n: n, side: true},
			colDotCase{rows: rows, n: n, side: true, sideAccum: true},
			colDotCase{rows: rows, n: n, pair: true, sharedA: true},
			colDotCase{rows: rows, n: n, pair: true, side: true},
		)
	}
	for _, form := range []string{"windows", "dot4", "dot"} {
		restore := gpu.SetColDotForm(form)
		for _, c := range cases {
			name := fmt.Sprintf("%s/%d×%d/rs=%v,mask=%v,side=%v,accum=%v,pair=%v,sharedA=%v",
				form, c.rows, c.n, c.rowScale, c.mask, c.side, c.sideAccum, c.pair, c.sharedA)
			t.Run(name, func(t *testing.T) {
				before := gpu.ColDot4Dispatches()
				checkGradColDot(t, d, c)
				ran := gpu.ColDot4Dispatches() > before
				if want := form == "dot4" && c.n%4 == 0 && !c.pair; ran != want {
					t.Errorf("stage dot4 ran: %v, want %v", ran, want)
				}
			})
		}
		restore()
	}
}

func checkGradColDot(t *testing.T, d *gpu.Device, c colDotCase) {
	rng := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.n)))
	rows, n := c.rows, c.n
	af, ad := randF32(rng, rows*n, 1)
	bf, bd := randF32(rng, rows*n, 1)
	cf, cd := randF32(rng, rows*n, 1)
	rsf, rsd := randF32(rng, rows, 2)
	sf, sd := randF32(rng, n, 1)
	s2f, s2d := randF32(rng, n, 1)
	o0f, o0d := randF32(rng, n, 1)
	o1f, o1d := randF32(rng, n, 1)
	sof, sod := randF32(rng, rows*n, 1)
	maskv := make([]uint32, n)
	for j := range maskv {
		if j%3 != 1 {
			maskv[j] = 1
		}
	}
	up := func(label string, v []float32) *gpu.Buffer { return must(d.UploadFloat32(label, v, len(v))).T(t) }
	a, b := up("a", af), up("b", bf)
	out0, out1 := up("out0", o0f), up("out1", o1f)
	var c2, rs, s, s2, so, mask *gpu.Buffer
	if c.pair {
		c2 = up("c2", cf)
	}
	if c.rowScale {
		rs = up("rs", rsf)
	}
	if c.side {
		s, so = up("s", sf), up("so", sof)
		if c.pair {
			s2 = up("s2", s2f)
		}
	}
	if c.mask {
		mask = must(d.UploadUint32("mask", maskv, n)).T(t)
	}
	err := d.Run(func(r *gpu.Recorder) error {
		if c.pair {
			return gpu.GradColDot2(r, c.sharedA, a, b, c2, s, s2, out0, out1, so, rows, n)
		}
		return gpu.GradColDot(r, a, b, rs, mask, s, out0, so, rows, n, c.sideAccum)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The host sums, and Σ|terms| per column for the tolerance.
	want0, want1 := append([]float64(nil), o0d...), append([]float64(nil), o1d...)
	mag0, mag1 := make([]float64, n), make([]float64, n)
	wantSO := append([]float64(nil), sod...)
	for row := 0; row < rows; row++ {
		for j := 0; j < n; j++ {
			e := row*n + j
			var t0, t1 float64
			switch {
			case c.pair && c.sharedA:
				t0, t1 = ad[e]*bd[e], ad[e]*cd[e]
			case c.pair:
				t0, t1 = ad[e]*bd[e], cd[e]*bd[e]
			default:
				t0 = ad[e] * bd[e]
				if c.rowScale {
					t0 *= rsd[row]
				}
			}
			want0[j] += t0
			want1[j] += t1
			mag0[j] += math.Abs(t0)
			mag1[j] += math.Abs(t1)
			switch {
			case c.side && c.pair:
				wantSO[e] = ad[e]*sd[j] + cd[e]*s2d[j]
			case c.side && c.sideAccum:
				wantSO[e] += ad[e] * sd[j]
			case c.side:
				wantSO[e] = ad[e] * sd[j]
			}
		}
	}
	if c.mask {
		for j := range want0 {
			if maskv[j] == 0 {
				want0[j] = 0
			}
		}
	}
	check := func(what string, buf *gpu.Buffer, want, mag []float64) {
		got := must(d.ReadFloat32(buf)).T(t)
		for j := range got {
			tol := 1e-6 * (mag[j] + math.Abs(want[j]) + 1)
			if e := math.Abs(float64(got[j]) - want[j]); !(e <= tol) {
				t.Fatalf("%s[%d] = %g, want %g (|err| %.3g > %.3g)", what, j, got[j], want[j], e, tol)
			}
		}
	}
	check("out0", out0, want0, mag0)
	if c.pair {
		check("out1", out1, want1, mag1)
	}
	if c.side {
		checkClose(t, "so", must(d.ReadFloat32(so)).T(t), wantSO, 1e-6, 1e-6)
	}
}

// TestUniformViewChecks: a gpu.Uniform binding is refused in Go, before anything is
// submitted, at an offset off the uniform alignment, beyond one uniform binding, beside a
// read-write binding of the same buffer, and on a device whose buffers lack the uniform usage
// (GPUs: Device.UniformViews).
func TestUniformViewChecks(t *testing.T) {
	d := gputest.Open(t)
	const n = 128 // 512 bytes a row
	a := must(d.NewBuffer("a", gpu.F32, 256, n)).T(t)
	defer a.Release()
	out := must(d.NewBuffer("out", gpu.F32, n)).T(t)
	defer out.Release()
	// grad_col_dot.wgsl's stage "windows" with one window of 64 rows of a and b.
	params := struct {
		Stage                                   string
		NW, NV4, W, Last                        int
		Two, SharedA, SideAccum                 bool
		RS, S, S2, Mask, Out, Out2, SO, C2, Uni int
	}{Stage: "windows", NW: 1, NV4: 64 * n / 4, W: 64, Last: 64, RS: -1, S: -1, S2: -1, Mask: -1, Out: 2, Out2: -1, SO: -1, C2: -1, Uni: 3}
	k := must(d.Kernel(gpu.KernelSpec{Name: "UniformViewChecks", File: "grad_col_dot.wgsl", Params: params,
		Bindings: []gpu.Access{gpu.Uniform, gpu.Uniform, gpu.ReadWrite}, Uniforms: 3})).T(t)
	view := func(off, size uint64) gpu.Binding { return gpu.Binding{Buf: a, Offset: off, Size: size} }
	type check struct {
		name  string
		binds []gpu.Binding
		want  string
	}
	checks := []check{
		{"misaligned", []gpu.Binding{view(16, 256*n), view(0, 256*n), gpu.Whole(out)}, "not a multiple of"},
		{"too large", []gpu.Binding{view(0, 65536+4*n), view(0, 256*n), gpu.Whole(out)}, "maxUniformBufferBindingSize"},
		{"beside read-write", []gpu.Binding{view(0, 256*n), view(0, 256*n), gpu.Whole(a)}, "read-write"},
	}
	if !d.UniformViews() {
		checks = []check{{"no uniform usage", []gpu.Binding{view(0, 256*n), view(0, 256*n), gpu.Whole(out)}, "need a CPU adapter"}}
	}
	for _, c := range checks {
		r := d.Begin()
		err := r.Dispatch(k, [3]int{4, 1, 1}, []uint32{n / 4, 0, 0}, c.binds...)
		r.Discard()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Dispatch error %v, want one naming %q", c.name, err, c.want)
		}
	}
}
