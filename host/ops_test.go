package host

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// Reference scalar functions written out independently of the package's helpers.
func refSigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
func refSiLU(x float64) float64    { return x / (1 + math.Exp(-x)) }

func near(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !(math.Abs(got[i]-want[i]) <= tol*math.Max(1, math.Abs(want[i]))) {
			t.Errorf("%s[%d] = %.15g, want %.15g", what, i, got[i], want[i])
		}
	}
}

func TestEmbedding(t *testing.T) {
	table := []float64{0, 1, 10, 11, 20, 21} // vocab 3, hidden 2
	y, err := Embedding(table, 3, 2, []int{2, 0, 2})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "Embedding", y, []float64{20, 21, 0, 1, 20, 21}, 0)
	if _, err := Embedding(table, 3, 2, []int{3}); err == nil {
		t.Error("id 3 of vocab 3 accepted")
	}
	if _, err := Embedding(table, 3, 2, []int{-1}); err == nil {
		t.Error("id −1 accepted")
	}
	if _, err := Embedding(table[:5], 3, 2, []int{0}); err == nil {
		t.Error("short table accepted")
	}
}

func TestLinearOp(t *testing.T) {
	x := []float64{1, 2, 3, -1, 0, 2}    // [2, 3]
	w := []float64{1, 0, 1, 2, -1, 0.5}  // [2, 3]: rows are output features
	want := []float64{4, 1.5, 1, -2 + 1} // y[r,o] = Σ_i x[r,i] w[o,i]
	y, err := LinearOp(x, 2, 3, w, 2)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "LinearOp", y, want, 1e-15)
	d, err := NewDense(w, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "Dense.Apply", d.Apply(x, 2), want, 1e-15)
	if d.In() != 3 || d.Out() != 2 {
		t.Errorf("Dense In/Out %d/%d", d.In(), d.Out())
	}
	if _, err := LinearOp(x, 2, 3, w[:5], 2); err == nil {
		t.Error("short w accepted")
	}
	if _, err := NewDense(w, 3, 3); err == nil {
		t.Error("NewDense with wrong size accepted")
	}
}

// TestRMSNormGain pins the (1 + w) versus plain w gain (DESIGN.md §11).
func TestRMSNormGain(t *testing.T) {
	x := []float64{3, 4} // mean(x²) = 12.5
	w := []float64{0.5, -1}
	r := 1 / math.Sqrt(12.5)
	y, err := RMSNorm(x, 1, 2, w, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "RMSNorm (1+w)", y, []float64{3 * r * 1.5, 0}, 1e-15)
	y, err = RMSNorm(x, 1, 2, w, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "RMSNorm w", y, []float64{3 * r * 0.5, -4 * r}, 1e-15)
	// eps enters as mean(x²) + eps.
	y, _ = RMSNorm([]float64{1, 1}, 1, 2, []float64{0, 0}, 3, true)
	near(t, "RMSNorm eps", y, []float64{0.5, 0.5}, 1e-15)
	if _, err := RMSNorm(x, 1, 2, w[:1], 0, true); err == nil {
		t.Error("short w accepted")
	}
	if _, err := RMSNorm(x, 1, 2, w, -1, true); err == nil {
		t.Error("negative eps accepted")
	}
}

// TestQKNormRoPE pins partial RoPE with the rotate-half partner and pass-through dims on a
// hand-computed case (DESIGN.md §11).
func TestQKNormRoPE(t *testing.T) {
	// headDim 6, rot 4, θ = 100: inv_freq = [1, 100^(−1/2)] = [1, 0.1]; pairs (0,2), (1,3);
	// dims 4, 5 pass through. x has mean(x²) = 1, so with eps 0 the norm only applies 1 + w.
	const hd, rot, theta, T = 6, 4, 100.0, 3
	row := []float64{1, -1, 1, -1, 1, -1}
	w := []float64{0, 0, 0, 0, 0.5, -0.5}
	x := make([]float64, 0, 2*T*hd)
	for range 2 * T { // nb = 2 windows of 3 tokens, one head
		x = append(x, row...)
	}
	y, err := QKNormRoPE(x, 2*T, 1, hd, w, 0, rot, theta, T)
	if err != nil {
		t.Fatal(err)
	}
	at := func(p float64) []float64 {
		a0, a1 := p*1, p*0.1
		return []float64{
			math.Cos(a0) - math.Sin(a0),  // x0 cos − x2 sin
			-math.Cos(a1) + math.Sin(a1), // x1 cos − x3 sin
			math.Cos(a0) + math.Sin(a0),  // x2 cos + x0 sin
			-math.Cos(a1) - math.Sin(a1), // x3 cos + x1 sin
			1.5, -0.5,                    // pass-through, gain 1 + w
		}
	}
	for b := 0; b < 2; b++ {
		for p := 0; p < T; p++ {
			r := b*T + p
			near(t, "QKNormRoPE row "+strconv.Itoa(r), y[r*hd:(r+1)*hd], at(float64(p)), 1e-14)
		}
	}
	// Two heads, second scaled by 2: the per-head norm removes the scale.
	x2 := append(append([]float64{}, row...), 2, -2, 2, -2, 2, -2)
	y2, err := QKNormRoPE(x2, 1, 2, hd, w, 0, rot, theta, 1)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "QKNormRoPE per-head norm", y2, append(at(0), at(0)...), 1e-14)
	if _, err := QKNormRoPE(x, 2*T, 1, hd, w, 0, 3, theta, T); err == nil {
		t.Error("odd rot accepted")
	}
	if _, err := QKNormRoPE(x, 2*T, 1, hd, w, 0, rot, theta, 4); err == nil {
		t.Error("rows not a multiple of t accepted")
	}
}

// TestSplitQueryGate pins the per-head query/gate interleave of q_proj (DESIGN.md §11).
func TestSplitQueryGate(t *testing.T) {
	qg := []float64{1, 2, 3, 4, 5, 6, 7, 8} // 1 row, 2 heads, hd 2: [q0 | g0 | q1 | g1]
	q, g, err := SplitQueryGate(qg, 1, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "query", q, []float64{1, 2, 5, 6}, 0)
	near(t, "gate", g, []float64{3, 4, 7, 8}, 0)
	if _, _, err := SplitQueryGate(qg[:7], 1, 2, 2); err == nil {
		t.Error("short qg accepted")
	}
}

// TestAttentionGQA checks causality, the softmax and the GQA head mapping h → h/(nh/nkv)
// on a hand-computed case (DESIGN.md §11).
func TestAttentionGQA(t *testing.T) {
	const nb, T, nh, nkv, hd = 1, 2, 4, 2, 2
	s2 := math.Sqrt2
	// k, v [T, nkv, hd]: KV head 0 has k0 = e0, k1 = e1; KV head 1 has zero keys.
	k := []float64{1, 0, 0, 0, 0, 1, 0, 0}
	v := []float64{1, 2, 10, 20, 3, 4, 30, 40}
	// q [T, nh, hd]; at position 1, head 0 scores (ln 3, 0) after the hd^−½ scale.
	q := []float64{
		5, 5, 5, 5, 5, 5, 5, 5, // position 0: one visible key whatever q is
		s2 * math.Log(3), 0, 0, 0, 7, -3, 0, 0,
	}
	o, lse, err := Attention(q, k, v, nb, T, nh, nkv, hd)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{
		1, 2, 1, 2, 10, 20, 10, 20, // position 0: v_0 of heads 0,0,1,1
		1.5, 2.5, 2, 3, 20, 30, 20, 30, // ¾v0+¼v1; uniform; uniform; uniform
	}
	near(t, "Attention out", o, want, 1e-14)
	near(t, "Attention lse", lse, []float64{
		5 * 1 / s2, 5 * 1 / s2, 0, 0,
		math.Log(4), math.Log(2), math.Log(2), math.Log(2),
	}, 1e-14)
	if _, _, err := Attention(q, k, v, nb, T, 3, nkv, hd); err == nil {
		t.Error("nh not a multiple of nkv accepted")
	}
	// Windows are independent: window 1 equal to window 0 gives the same output.
	q2, k2, v2 := append(append([]float64{}, q...), q...), append(append([]float64{}, k...), k...), append(append([]float64{}, v...), v...)
	o2, _, err := Attention(q2, k2, v2, 2, T, nh, nkv, hd)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "Attention window 1", o2[len(o):], want, 1e-14)
}

func TestAttentionGateSwiGLUResidual(t *testing.T) {
	y, err := AttentionGate([]float64{2, -3}, []float64{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "AttentionGate", y, []float64{1, -3 * refSigmoid(1)}, 1e-15)
	y, err = SwiGLU([]float64{1, -2}, []float64{3, 4})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "SwiGLU", y, []float64{3 * refSiLU(1), 4 * refSiLU(-2)}, 1e-15)
	y, err = ResidualAdd([]float64{1, 2}, []float64{0.5, -2})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "ResidualAdd", y, []float64{1.5, 0}, 0)
	if _, err := AttentionGate([]float64{1}, nil); err == nil {
		t.Error("AttentionGate length mismatch accepted")
	}
	if _, err := SwiGLU([]float64{1}, nil); err == nil {
		t.Error("SwiGLU length mismatch accepted")
	}
	if _, err := ResidualAdd([]float64{1}, nil); err == nil {
		t.Error("ResidualAdd length mismatch accepted")
	}
}

// TestCausalConv1dSiLU checks the taps order and that the left padding is per window: huge
// values in window 0 must not reach window 1 (DESIGN.md §11).
func TestCausalConv1dSiLU(t *testing.T) {
	const nb, T, C, K = 2, 3, 2, 3
	w := []float64{1, 10, 100, 0.5, 0, -1} // [C, 1, K]; tap K−1 multiplies the current token
	x := []float64{
		1e3, 1e3, 1e3, 1e3, 1e3, 1e3, // window 0
		1, 4, 2, 5, 3, 6, // window 1: channel 0 = 1, 2, 3; channel 1 = 4, 5, 6
	}
	y, err := CausalConv1dSiLU(x, nb, T, C, w, K)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{
		refSiLU(100 * 1), refSiLU(-1 * 4),
		refSiLU(10*1 + 100*2), refSiLU(0*4 - 1*5),
		refSiLU(1*1 + 10*2 + 100*3), refSiLU(0.5*4 + 0*5 - 1*6),
	}
	near(t, "conv window 1", y[T*C:], want, 1e-14)
	near(t, "conv window 0 position 0", y[:C], []float64{refSiLU(100e3), refSiLU(-1e3)}, 1e-14)
	if _, err := CausalConv1dSiLU(x, nb, T, C, w[:5], K); err == nil {
		t.Error("short weight accepted")
	}
}

func TestGatedDeltaGates(t *testing.T) {
	a := []float64{0.3, -50}
	b := []float64{-0.7, 2}
	g, beta, err := GatedDeltaGates(a, b, 1, 2, []float64{math.Log(2), 0}, []float64{0.2, 0})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "g", g, []float64{-2 * math.Log(1+math.Exp(0.5)), -math.Log(1 + math.Exp(-50))}, 1e-14)
	near(t, "beta", beta, []float64{refSigmoid(-0.7), refSigmoid(2)}, 1e-15)
	if _, _, err := GatedDeltaGates(a, b, 1, 2, []float64{0}, []float64{0, 0}); err == nil {
		t.Error("short A_log accepted")
	}
}

func TestL2Norm(t *testing.T) {
	y, err := L2Norm([]float64{3, 4, 0, 0}, 2, 2, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	f := 0.5 / math.Sqrt(25+1e-6)
	near(t, "L2Norm", y, []float64{3 * f, 4 * f, 0, 0}, 1e-15)
	if _, err := L2Norm([]float64{1}, 1, 2, 1); err == nil {
		t.Error("wrong length accepted")
	}
}

func TestGatedRMSNorm(t *testing.T) {
	x := []float64{3, 4, 1, 1} // 1 row, 2 value heads of dv = 2
	z := []float64{0, 1, 2, -1}
	w := []float64{2, 0.5}
	y, err := GatedRMSNorm(x, z, 1, 2, 2, w, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := 1 / math.Sqrt(12.5) // per head: head 0 rms √12.5, head 1 rms 1
	near(t, "GatedRMSNorm", y, []float64{0, 0.5 * 4 * r * refSiLU(1), 2 * refSiLU(2), 0.5 * refSiLU(-1)}, 1e-15)
	if _, err := GatedRMSNorm(x, z[:3], 1, 2, 2, w, 0); err == nil {
		t.Error("short z accepted")
	}
}

// TestGatedDeltaRuleTwoSteps compares the recurrence with the hand-unrolled two-step
// solution, with Hv = 2·Hk (value head j reads key head j/2) and two windows (the state
// restarts from zero), including the final state. From S₀ = 0:
//
//	S₁ = k₁ ⊗ β₁v₁,  o₁ = (k₁·q₁) β₁v₁
//	u  = β₂(v₂ − e^{g₂}(k₁·k₂) β₁v₁),  S₂ = e^{g₂} S₁ + k₂ ⊗ u,  o₂ = e^{g₂}(k₁·q₂) β₁v₁ + (k₂·q₂) u
func TestGatedDeltaRuleTwoSteps(t *testing.T) {
	const nb, T, hk, hv, dk, dv = 2, 2, 2, 4, 3, 2
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int, lo, hi float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = lo + (hi-lo)*rng.Float64()
		}
		return v
	}
	rows := nb * T
	q, k := rnd(rows*hk*dk, -1, 1), rnd(rows*hk*dk, -1, 1)
	v := rnd(rows*hv*dv, -1, 1)
	g, beta := rnd(rows*hv, -1, 0), rnd(rows*hv, 0, 1)
	o, S, err := GatedDeltaRule(q, k, v, g, beta, nb, T, hk, hv, dk, dv, true)
	if err != nil {
		t.Fatal(err)
	}
	dot := func(a, b []float64) float64 {
		var s float64
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	for b := 0; b < nb; b++ {
		for j := 0; j < hv; j++ {
			kh := j / (hv / hk)
			r1, r2 := b*T, b*T+1
			k1, k2 := k[(r1*hk+kh)*dk:][:dk], k[(r2*hk+kh)*dk:][:dk]
			q1, q2 := q[(r1*hk+kh)*dk:][:dk], q[(r2*hk+kh)*dk:][:dk]
			v1, v2 := v[(r1*hv+j)*dv:][:dv], v[(r2*hv+j)*dv:][:dv]
			b1, b2 := beta[r1*hv+j], beta[r2*hv+j]
			e2 := math.Exp(g[r2*hv+j])
			o1 := make([]float64, dv)
			u := make([]float64, dv)
			o2 := make([]float64, dv)
			for c := 0; c < dv; c++ {
				o1[c] = dot(k1, q1) * b1 * v1[c]
				u[c] = b2 * (v2[c] - e2*dot(k1, k2)*b1*v1[c])
				o2[c] = e2*dot(k1, q2)*b1*v1[c] + dot(k2, q2)*u[c]
			}
			tag := "window " + strconv.Itoa(b) + " head " + strconv.Itoa(j)
			near(t, "o₁ "+tag, o[(r1*hv+j)*dv:][:dv], o1, 1e-14)
			near(t, "o₂ "+tag, o[(r2*hv+j)*dv:][:dv], o2, 1e-14)
			S2 := make([]float64, dk*dv)
			for a := 0; a < dk; a++ {
				for c := 0; c < dv; c++ {
					S2[a*dv+c] = e2*k1[a]*b1*v1[c] + k2[a]*u[c]
				}
			}
			near(t, "S₂ "+tag, S[(b*hv+j)*dk*dv:][:dk*dv], S2, 1e-14)
		}
	}
	if o2, S2, _ := GatedDeltaRule(q, k, v, g, beta, nb, T, hk, hv, dk, dv, false); S2 != nil || len(o2) != len(o) {
		t.Error("wantState false still returned a state")
	}
	if _, _, err := GatedDeltaRule(q, k, v, g, beta, nb, T, 3, hv, dk, dv, false); err == nil {
		t.Error("hv not a multiple of hk accepted")
	}
}

func TestLogSumExpLogSoftmax(t *testing.T) {
	x := []float64{0, math.Log(3), 1000, 1000, math.Inf(-1), math.Inf(-1)}
	lse, err := LogSumExp(x, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "LogSumExp", lse[:2], []float64{math.Log(4), 1000 + math.Log(2)}, 1e-15)
	if !math.IsInf(lse[2], -1) {
		t.Errorf("LogSumExp of −Inf row = %g", lse[2])
	}
	ls, err := LogSoftmax(x[:4], 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "LogSoftmax", ls, []float64{-math.Log(4), math.Log(0.75), -math.Log(2), -math.Log(2)}, 1e-15)
	if _, err := LogSumExp(x, 4, 2); err == nil {
		t.Error("wrong length accepted")
	}
}

// TestTopKTies pins descending order with ties broken by the lower id.
func TestTopKTies(t *testing.T) {
	x := []float64{1, 3, 3, 2, 3, 0, 3, 2, 1, 0} // 2 rows of 5; row 1 ties ids 0 and 4
	ids, lp, err := TopK(x, 2, 5, 4)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := []int{1, 2, 4, 3, 1, 2, 3, 0}
	for i := range wantIDs {
		if ids[i] != wantIDs[i] {
			t.Fatalf("TopK ids %v, want %v", ids, wantIDs)
		}
	}
	l0 := math.Log(math.E + 3*math.Exp(3) + math.Exp(2))
	l1 := math.Log(2 + math.Exp(3) + math.Exp(2) + math.E)
	near(t, "TopK logprobs", lp, []float64{3 - l0, 3 - l0, 3 - l0, 2 - l0, 3 - l1, 2 - l1, 1 - l1, 0 - l1}, 1e-14)
	if _, _, err := TopK(x, 2, 5, 6); err == nil {
		t.Error("k > n accepted")
	}
	if _, _, err := TopK([]float64{0, math.NaN()}, 1, 2, 1); err == nil {
		t.Error("NaN logit accepted")
	}
}
