package host

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
)

// Every backward of backward.go and backward_linear.go is checked here against central
// finite differences of its forward op: with a fixed random dy, the scalar
// L(inputs) = Σ dy ⊙ op(inputs) has d L / d input = the backward's result, and each
// coordinate is compared with (L(x + h) − L(x − h)) / 2h.

func randVec(rng *rand.Rand, n int, scale float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = scale * rng.NormFloat64()
	}
	return v
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// fdCheck compares grad with central differences of loss over the coordinates of x (every
// coordinate when len(x) ≤ 400, else 400 spread ones), perturbing x in place by ±h. The
// error allowed per coordinate is tol·(1 + |fd|). It logs the largest error.
func fdCheck(t *testing.T, name string, x, grad []float64, h, tol float64, loss func() float64) {
	t.Helper()
	step := 1
	if len(x) > 400 {
		step = len(x) / 400
	}
	fdCompare(t, name, len(x), step, grad, tol, func(i int) float64 {
		x0 := x[i]
		x[i] = x0 + h
		lp := loss()
		x[i] = x0 - h
		lm := loss()
		x[i] = x0
		return (lp - lm) / (2 * h)
	})
}

// fdCompare compares grad[i] with the finite difference fd(i) for every step-th of n
// coordinates, allowing tol·(1 + |fd|) each; it fails at the first one beyond that and
// otherwise logs the largest error.
func fdCompare(t *testing.T, name string, n, step int, grad []float64, tol float64, fd func(i int) float64) {
	t.Helper()
	if len(grad) != n {
		t.Fatalf("%s: gradient has %d values, want %d", name, len(grad), n)
	}
	var worst float64
	for i := 0; i < n; i += step {
		d := fd(i)
		e := math.Abs(d-grad[i]) / (1 + math.Abs(d))
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		worst = math.Max(worst, e)
		if !(e <= tol) {
			t.Errorf("%s[%d]: backward %.10g, finite difference %.10g", name, i, grad[i], d)
			return
		}
	}
	t.Logf("%s: max error %.3g over %d coordinates", name, worst, (n+step-1)/step)
}

const (
	fdH   = 1e-5
	fdTol = 1e-7
)

func must[T any](t *testing.T) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// first is must for a call with two results and an error: it returns the first result.
func first[A, B any](t *testing.T) func(a A, b B, err error) A {
	return func(a A, _ B, err error) A {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
}

func TestRMSNormBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const rows, n, eps = 3, 7, 1e-6
	for _, zc := range []bool{true, false} {
		x, w, dy := randVec(rng, rows*n, 1), randVec(rng, n, 0.5), randVec(rng, rows*n, 1)
		x[n] = 1e-4 // a row of tiny values, where eps matters
		for i := n + 1; i < 2*n; i++ {
			x[i] = 1e-4 * rng.NormFloat64()
		}
		dx, dw, err := RMSNormBackward(x, rows, n, w, eps, zc, dy)
		if err != nil {
			t.Fatal(err)
		}
		loss := func() float64 { return dot(dy, must[[]float64](t)(RMSNorm(x, rows, n, w, eps, zc))) }
		name := map[bool]string{true: "(1+w)", false: "w"}[zc]
		fdCheck(t, "RMSNorm "+name+" dx", x, dx, 1e-7, 1e-6, loss)
		fdCheck(t, "RMSNorm "+name+" dw", w, dw, fdH, fdTol, loss)
	}
}

func TestQKNormRoPEBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 1))
	const nb, T, heads, hd, rot, theta, eps = 2, 3, 2, 8, 4, 100.0, 1e-6
	rows := nb * T
	x, w, dy := randVec(rng, rows*heads*hd, 1), randVec(rng, hd, 0.3), randVec(rng, rows*heads*hd, 1)
	dx, dw, err := QKNormRoPEBackward(x, rows, heads, hd, w, eps, rot, theta, T, dy)
	if err != nil {
		t.Fatal(err)
	}
	loss := func() float64 {
		return dot(dy, must[[]float64](t)(QKNormRoPE(x, rows, heads, hd, w, eps, rot, theta, T)))
	}
	fdCheck(t, "QKNormRoPE dx", x, dx, fdH, fdTol, loss)
	fdCheck(t, "QKNormRoPE dw", w, dw, fdH, fdTol, loss)
}

func TestAttentionBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	const nb, T, nh, nkv, hd = 2, 5, 4, 2, 3
	rows := nb * T
	q, k, v := randVec(rng, rows*nh*hd, 1), randVec(rng, rows*nkv*hd, 1), randVec(rng, rows*nkv*hd, 1)
	dy := randVec(rng, rows*nh*hd, 1)
	out, lse, err := Attention(q, k, v, nb, T, nh, nkv, hd)
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv, err := AttentionBackward(q, k, v, out, lse, dy, nb, T, nh, nkv, hd)
	if err != nil {
		t.Fatal(err)
	}
	loss := func() float64 { return dot(dy, first[[]float64, []float64](t)(Attention(q, k, v, nb, T, nh, nkv, hd))) }
	fdCheck(t, "Attention dq", q, dq, fdH, fdTol, loss)
	fdCheck(t, "Attention dk", k, dk, fdH, fdTol, loss)
	fdCheck(t, "Attention dv", v, dv, fdH, fdTol, loss)
	if _, _, _, err := AttentionBackward(q, k, v, out, lse[1:], dy, nb, T, nh, nkv, hd); err == nil || !strings.Contains(err.Error(), "lse") {
		t.Errorf("short lse: %v", err)
	}
}

func TestCausalConv1dSiLUBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	const C, K = 3, 4
	for _, T := range []int{6, 2} { // t ≥ K and t < K
		const nb = 2
		x, w, dy := randVec(rng, nb*T*C, 1), randVec(rng, C*K, 0.7), randVec(rng, nb*T*C, 1)
		dx, err := CausalConv1dSiLUBackward(x, nb, T, C, w, K, dy)
		if err != nil {
			t.Fatal(err)
		}
		loss := func() float64 { return dot(dy, must[[]float64](t)(CausalConv1dSiLU(x, nb, T, C, w, K))) }
		fdCheck(t, "CausalConv1dSiLU dx (t="+string(rune('0'+T))+")", x, dx, fdH, fdTol, loss)
	}
}

func TestGatedDeltaGatesBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 1))
	const rows, hv = 5, 3
	a, b := randVec(rng, rows*hv, 2), randVec(rng, rows*hv, 2)
	aLog, dt := randVec(rng, hv, 1), randVec(rng, hv, 1)
	dg, dbeta := randVec(rng, rows*hv, 1), randVec(rng, rows*hv, 1)
	da, db, err := GatedDeltaGatesBackward(a, b, rows, hv, aLog, dt, dg, dbeta)
	if err != nil {
		t.Fatal(err)
	}
	loss := func() float64 {
		g, beta, err := GatedDeltaGates(a, b, rows, hv, aLog, dt)
		if err != nil {
			t.Fatal(err)
		}
		return dot(dg, g) + dot(dbeta, beta)
	}
	fdCheck(t, "GatedDeltaGates da", a, da, fdH, fdTol, loss)
	fdCheck(t, "GatedDeltaGates db", b, db, fdH, fdTol, loss)
}

// TestL2NormBackward includes rows of tiny and zero norm (DESIGN.md §11), where the ε of
// the norm dominates and a backward that ignores it is wrong by orders of magnitude.
func TestL2NormBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1))
	const rows, n = 4, 6
	for _, scale := range []float64{1, 1 / math.Sqrt(n)} {
		x, dy := randVec(rng, rows*n, 1), randVec(rng, rows*n, 1)
		for i := n; i < 2*n; i++ {
			x[i] *= 1e-4 // Σx² ~ ε
		}
		for i := 2 * n; i < 3*n; i++ {
			x[i] *= 1e-7 // Σx² ≪ ε
		}
		for i := 3 * n; i < 4*n; i++ {
			x[i] = 0
		}
		dx, err := L2NormBackward(x, rows, n, scale, dy)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range dx {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("dx[%d] = %g", i, v)
			}
		}
		loss := func() float64 { return dot(dy, must[[]float64](t)(L2Norm(x, rows, n, scale))) }
		// Steps well below the smallest row scale (1e-7 · |x|) keep the difference exact enough.
		fdCheck(t, "L2Norm dx", x, dx, 1e-10, 1e-5, loss)
	}
}

func TestGatedDeltaRuleBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	for _, c := range []struct{ nb, T, hk, hv, dk, dv int }{
		{2, 37, 1, 2, 4, 3}, // t crosses two chunk checkpoints, t not a multiple of the chunk
		{1, 5, 2, 4, 3, 2},  // t below one chunk, two key heads each shared by two value heads
	} {
		rows := c.nb * c.T
		q := must[[]float64](t)(L2Norm(randVec(rng, rows*c.hk*c.dk, 1), rows*c.hk, c.dk, 1/math.Sqrt(float64(c.dk))))
		k := must[[]float64](t)(L2Norm(randVec(rng, rows*c.hk*c.dk, 1), rows*c.hk, c.dk, 1))
		v := randVec(rng, rows*c.hv*c.dv, 1)
		g := make([]float64, rows*c.hv)
		beta := make([]float64, rows*c.hv)
		for i := range g {
			g[i] = -rng.Float64()
			beta[i] = 0.05 + 0.9*rng.Float64()
		}
		dy := randVec(rng, rows*c.hv*c.dv, 1)
		dq, dk, dv, dg, dbeta, err := GatedDeltaRuleBackward(q, k, v, g, beta, dy, c.nb, c.T, c.hk, c.hv, c.dk, c.dv)
		if err != nil {
			t.Fatal(err)
		}
		loss := func() float64 {
			return dot(dy, first[[]float64, []float64](t)(GatedDeltaRule(q, k, v, g, beta, c.nb, c.T, c.hk, c.hv, c.dk, c.dv, false)))
		}
		fdCheck(t, "GatedDeltaRule dq", q, dq, fdH, fdTol, loss)
		fdCheck(t, "GatedDeltaRule dk", k, dk, fdH, fdTol, loss)
		fdCheck(t, "GatedDeltaRule dv", v, dv, fdH, fdTol, loss)
		fdCheck(t, "GatedDeltaRule dg", g, dg, fdH, fdTol, loss)
		fdCheck(t, "GatedDeltaRule dbeta", beta, dbeta, fdH, fdTol, loss)
	}
}

func TestGatedRMSNormBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1))
	const rows, hv, dv, eps = 3, 2, 5, 1e-6
	x, z, w, dy := randVec(rng, rows*hv*dv, 1), randVec(rng, rows*hv*dv, 2), randVec(rng, dv, 1), randVec(rng, rows*hv*dv, 1)
	dx, dz, dw, err := GatedRMSNormBackward(x, z, rows, hv, dv, w, eps, dy)
	if err != nil {
		t.Fatal(err)
	}
	loss := func() float64 { return dot(dy, must[[]float64](t)(GatedRMSNorm(x, z, rows, hv, dv, w, eps))) }
	fdCheck(t, "GatedRMSNorm dx", x, dx, fdH, fdTol, loss)
	fdCheck(t, "GatedRMSNorm dz", z, dz, fdH, fdTol, loss)
	fdCheck(t, "GatedRMSNorm dw", w, dw, fdH, fdTol, loss)
}

// TestElementwiseBackward checks the backward of the two-input elementwise ops (AttentionGate,
// SwiGLU) against finite differences, and that a short dy is refused.
func TestElementwiseBackward(t *testing.T) {
	for _, c := range []struct {
		op             string
		da, db         string // the gradients' names
		seed           uint64
		n              int
		scaleA, scaleB float64
		fwd            func(a, b []float64) ([]float64, error)
		bwd            func(a, b, dy []float64) ([]float64, []float64, error)
	}{
		{"AttentionGate", "do", "dgate", 4, 11, 1, 2, AttentionGate, AttentionGateBackward},
		{"SwiGLU", "dgate", "dup", 10, 13, 2, 1, SwiGLU, SwiGLUBackward},
	} {
		rng := rand.New(rand.NewPCG(c.seed, 1))
		a, b, dy := randVec(rng, c.n, c.scaleA), randVec(rng, c.n, c.scaleB), randVec(rng, c.n, 1)
		da, db, err := c.bwd(a, b, dy)
		if err != nil {
			t.Fatal(err)
		}
		loss := func() float64 { return dot(dy, must[[]float64](t)(c.fwd(a, b))) }
		fdCheck(t, c.op+" "+c.da, a, da, fdH, fdTol, loss)
		fdCheck(t, c.op+" "+c.db, b, db, fdH, fdTol, loss)
		if _, _, err := c.bwd(a, b, dy[1:]); err == nil {
			t.Errorf("%sBackward: short dy accepted", c.op)
		}
	}
}

func TestLinearOpBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 1))
	const rows, in, out = 3, 5, 4
	x, w, dy := randVec(rng, rows*in, 1), randVec(rng, out*in, 1), randVec(rng, rows*out, 1)
	dx, err := LinearOpBackward(dy, rows, in, w, out)
	if err != nil {
		t.Fatal(err)
	}
	loss := func() float64 { return dot(dy, must[[]float64](t)(LinearOp(x, rows, in, w, out))) }
	fdCheck(t, "LinearOp dx", x, dx, fdH, fdTol, loss)
	d, _ := NewDense(w, out, in)
	dx2, paths, err := LinearBackward(d, x, rows, dy)
	if err != nil || paths != nil {
		t.Fatalf("LinearBackward(Dense): paths %v, err %v", paths, err)
	}
	fdCheck(t, "LinearBackward(Dense) dx", x, dx2, fdH, fdTol, loss)
	if _, err := LinearOpBackward(dy[1:], rows, in, w, out); err == nil || !strings.Contains(err.Error(), "dy") {
		t.Errorf("short dy: %v", err)
	}
}

// fdCheckF32 is fdCheck for float32 parameters (the BLR scales): the step actually taken,
// float32(v + h) − float32(v − h), is the denominator, so rounding the perturbed value to
// float32 costs no accuracy. The loss is linear in each BLR scale, so the central difference
// has no truncation error and a large h is exact.
func fdCheckF32(t *testing.T, name string, x []float32, grad []float64, h, tol float64, loss func() float64) {
	t.Helper()
	fdCompare(t, name, len(x), 1, grad, tol, func(i int) float64 {
		x0 := x[i]
		xp, xm := float32(float64(x0)+h), float32(float64(x0)-h)
		x[i] = xp
		lp := loss()
		x[i] = xm
		lm := loss()
		x[i] = x0
		return (lp - lm) / (float64(xp) - float64(xm))
	})
}

func TestBLRLinearBackward(t *testing.T) {
	_, bw := blrTensor(t) // 24×16, two paths
	rng := rand.New(rand.NewPCG(12, 1))
	const rows = 4
	x, dy := randVec(rng, rows*bw.N, 1), randVec(rng, rows*bw.M, 1)
	dx, grads, err := BLRLinearBackward(bw, x, rows, dy)
	if err != nil {
		t.Fatal(err)
	}
	if len(grads) != 2 {
		t.Fatalf("%d path gradients, want 2", len(grads))
	}
	loss := func() float64 { return dot(dy, bw.Apply(x, rows)) }
	fdCheck(t, "BLR dx", x, dx, fdH, fdTol, loss)
	for p := range bw.Paths {
		q := &bw.Paths[p]
		pre := "BLR p" + string(rune('0'+p))
		fdCheckF32(t, pre+" dh", q.H, grads[p].H, 1e-2, 1e-9, loss)
		fdCheckF32(t, pre+" dl", q.L, grads[p].L, 1e-2, 1e-9, loss)
		fdCheckF32(t, pre+" dg", q.G, grads[p].G, 1e-2, 1e-9, loss)
	}
	// Through the Linear interface, as the student uses it.
	dx2, g2, err := LinearBackward(&BLRLinear{W: bw}, x, rows, dy)
	if err != nil || len(g2) != 2 || maxAbsDiff(dx2, dx) != 0 || maxAbsDiff(g2[1].L, grads[1].L) != 0 {
		t.Errorf("LinearBackward(BLRLinear) differs from BLRLinearBackward (err %v)", err)
	}
	if _, _, err := BLRLinearBackward(bw, x[1:], rows, dy); err == nil || !strings.Contains(err.Error(), "x has") {
		t.Errorf("short x: %v", err)
	}
	bad := &cmf.BLRWeight{M: 2, N: 7, Rank: 8}
	if _, _, err := BLRLinearBackward(bad, x, rows, dy); err == nil || !strings.Contains(err.Error(), "n = 7") {
		t.Errorf("invalid weight: %v", err)
	}
}

type otherLinear struct{ Dense }

func TestLinearBackwardUnknownType(t *testing.T) {
	if _, _, err := LinearBackward(&otherLinear{}, nil, 1, nil); err == nil || !strings.Contains(err.Error(), "otherLinear") {
		t.Errorf("unknown Linear: %v", err)
	}
	if _, _, err := LinearBackward(nil, nil, 1, nil); err == nil {
		t.Error("nil Linear accepted")
	}
}

// TestKLLoss checks KLLoss's value against the definition written with LogSoftmax and its
// gradient against central differences, with raw (unnormalised) teacher probabilities and a
// zero one.
func TestKLLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 1))
	const rows, V, k = 3, 11, 4
	logits := randVec(rng, rows*V, 2)
	ids := []int{3, 0, 10, 5, 1, 2, 3, 4, 9, 8, 7, 6}
	prob := []float64{0.5, 0.2, 0.1, 0.05, 1, 2, 3, 0, 0.3, 0.3, 0.2, 0.1}
	loss, per, dl, err := KLLoss(logits, rows, V, ids, prob, k)
	if err != nil {
		t.Fatal(err)
	}
	lsm := must[[]float64](t)(LogSoftmax(logits, rows, V))
	var want float64
	for r := 0; r < rows; r++ {
		var s, kl float64
		for i := 0; i < k; i++ {
			s += prob[r*k+i]
		}
		for i := 0; i < k; i++ {
			if p := prob[r*k+i] / s; p > 0 {
				kl += p * (math.Log(p) - lsm[r*V+ids[r*k+i]])
			}
		}
		if math.Abs(per[r]-kl) > 1e-14 {
			t.Errorf("KL of row %d = %.17g, want %.17g", r, per[r], kl)
		}
		want += kl / rows
	}
	if math.Abs(loss-want) > 1e-14 {
		t.Errorf("loss %.17g, want %.17g", loss, want)
	}
	fdCheck(t, "KLLoss dlogits", logits, dl, fdH, fdTol, func() float64 {
		l, _, _, err := KLLoss(logits, rows, V, ids, prob, k)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
	for _, c := range []struct {
		ids  []int
		prob []float64
		want string
	}{
		{[]int{3, 3, 1, 2}, []float64{1, 1, 1, 1}, "appears twice"},
		{[]int{3, 11, 1, 2}, []float64{1, 1, 1, 1}, "outside [0, 11)"},
		{[]int{3, 0, 1, 2}, []float64{1, -1, 1, 1}, "not finite and ≥ 0"},
		{[]int{3, 0, 1, 2}, []float64{1, math.NaN(), 1, 1}, "not finite and ≥ 0"},
		{[]int{3, 0, 1, 2}, []float64{0, 0, 0, 0}, "sum to 0"},
		{[]int{3, 0, 1}, []float64{1, 1, 1}, "topkIDs has 3"},
	} {
		if _, _, _, err := KLLoss(logits[:V], 1, V, c.ids, c.prob, 4); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ids %v prob %v: error %v, want one containing %q", c.ids, c.prob, err, c.want)
		}
	}
	if _, _, _, err := KLLoss(logits[:V], 1, V, make([]int, 12), make([]float64, 12), 12); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("k > vocab: %v", err)
	}
}

// TestBackwardErrors checks that each backward names the argument whose length is wrong.
func TestBackwardErrors(t *testing.T) {
	v := func(n int) []float64 { return make([]float64, n) }
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"RMSNorm dy", second(RMSNormBackward(v(6), 2, 3, v(3), 1e-6, true, v(5))), "dy has 5"},
		{"RMSNorm eps", second(RMSNormBackward(v(6), 2, 3, v(3), -1, true, v(6))), "eps"},
		{"QKNormRoPE rot", second(QKNormRoPEBackward(v(8), 2, 1, 4, v(4), 1e-6, 3, 10, 2, v(8))), "rotary"},
		{"QKNormRoPE t", second(QKNormRoPEBackward(v(8), 2, 1, 4, v(4), 1e-6, 2, 10, 3, v(8))), "multiple"},
		{"Conv dy", errOnly(CausalConv1dSiLUBackward(v(6), 1, 3, 2, v(8), 4, v(5))), "dy has 5"},
		{"Gates dbeta", second(GatedDeltaGatesBackward(v(4), v(4), 2, 2, v(2), v(2), v(4), v(3))), "dbeta has 3"},
		{"L2Norm scale", errOnly(L2NormBackward(v(4), 2, 2, math.Inf(1), v(4))), "scale"},
		{"DeltaRule do", deltaErr(GatedDeltaRuleBackward(v(2), v(2), v(2), v(1), v(1), v(3), 1, 1, 1, 1, 2, 2)), "do has 3"},
		{"DeltaRule heads", deltaErr(GatedDeltaRuleBackward(v(2), v(2), v(2), v(1), v(1), v(2), 1, 1, 2, 3, 1, 1)), "not a multiple"},
		{"GatedRMSNorm z", third(GatedRMSNormBackward(v(4), v(3), 2, 1, 2, v(2), 1e-6, v(4))), "z has 3"},
		{"SwiGLU", second(SwiGLUBackward(v(3), v(3), v(2))), "want one length"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, c.err, c.want)
		}
	}
}

func errOnly[A any](_ A, err error) error               { return err }
func second[A, B any](_ A, _ B, err error) error        { return err }
func third[A, B, C any](_ A, _ B, _ C, err error) error { return err }
func deltaErr[A any](_, _, _, _, _ A, err error) error  { return err }
