package host

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// L2NormEps is the ε of L2Norm: y = x·rsqrt(Σx² + ε), as HF's `l2norm` in the Qwen3.5
// GatedDeltaNet (torch_chunk_gated_delta_rule with use_qk_l2norm_in_kernel).
const L2NormEps = 1e-6

// checkLen returns an error naming arg when len(v) != want.
func checkLen(op, arg string, v []float64, want int, shape string) error {
	if len(v) != want {
		return fmt.Errorf("host.%s: %s has %d values, want %s = %d", op, arg, len(v), shape, want)
	}
	return nil
}

// lenCheck is one slice length that an op checks: its argument name, the slice, the length
// it must have and that length's formula (for the error).
type lenCheck struct {
	name  string
	v     []float64
	want  int
	shape string
}

// checkLens is checkLen over cs in order: the error names the first slice whose length
// disagrees.
func checkLens(op string, cs ...lenCheck) error {
	for _, c := range cs {
		if err := checkLen(op, c.name, c.v, c.want, c.shape); err != nil {
			return err
		}
	}
	return nil
}

// checkEps returns an error unless eps is finite and ≥ 0.
func checkEps(op string, eps float64) error {
	if !(eps >= 0) || math.IsInf(eps, 0) {
		return fmt.Errorf("host.%s: eps %g must be finite and ≥ 0", op, eps)
	}
	return nil
}

// checkPos returns an error naming the first non-positive size.
func checkPos(op string, names string, vals ...int) error {
	for _, v := range vals {
		if v <= 0 {
			return fmt.Errorf("host.%s: sizes (%s) must be positive, got %v", op, names, vals)
		}
	}
	return nil
}

// parallelFor runs f(i) for i in [0, n) on up to GOMAXPROCS goroutines.
func parallelFor(n int, f func(i int)) {
	w := runtime.GOMAXPROCS(0)
	if w > n {
		w = n
	}
	if w <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	wg.Add(w)
	for range w {
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

func silu(x float64) float64 { return x * sigmoid(x) }

// softplus is log(1+eˣ), computed without overflow. (PyTorch's F.softplus returns x for
// x > 20; the difference there is below 2e-9·x.)
func softplus(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

// Embedding gathers rows of an embedding table.
//
// table is [vocab, hidden] row-major; ids has one token id per output row, each in
// [0, vocab). It returns out [len(ids), hidden] with out[r,:] = table[ids[r],:].
// Errors: non-positive sizes, len(table) ≠ vocab·hidden, an id out of range (named with its
// position).
func Embedding(table []float64, vocab, hidden int, ids []int) ([]float64, error) {
	if err := checkPos("Embedding", "vocab, hidden", vocab, hidden); err != nil {
		return nil, err
	}
	if err := checkLen("Embedding", "table", table, vocab*hidden, "vocab·hidden"); err != nil {
		return nil, err
	}
	out := make([]float64, len(ids)*hidden)
	for r, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("host.Embedding: ids[%d] = %d is outside [0, %d)", r, id, vocab)
		}
		copy(out[r*hidden:(r+1)*hidden], table[id*hidden:(id+1)*hidden])
	}
	return out, nil
}

// LinearOp is the op "Linear" (named LinearOp in Go because the Linear interface of this
// package holds the name): y = x·Wᵀ, without bias, as torch.nn.Linear.
//
// x is [rows, in] row-major, w is [out, in] row-major (the HF/PyTorch weight layout); it
// returns y [rows, out] row-major, computed with gonum's blas64 Dgemm in float64.
// Errors: non-positive sizes or slice lengths that disagree with them.
func LinearOp(x []float64, rows, in int, w []float64, out int) ([]float64, error) {
	if err := checkPos("LinearOp", "rows, in, out", rows, in, out); err != nil {
		return nil, err
	}
	if err := checkLens("LinearOp", lenCheck{"x", x, rows * in, "rows·in"}, lenCheck{"w", w, out * in, "out·in"}); err != nil {
		return nil, err
	}
	return gemmXWt(x, rows, in, w, out), nil
}

// gemmXWt returns x·wᵀ for x [rows, in] and w [out, in] (sizes already checked).
func gemmXWt(x []float64, rows, in int, w []float64, out int) []float64 {
	y := make([]float64, rows*out)
	blas64.Gemm(blas.NoTrans, blas.Trans, 1,
		blas64.General{Rows: rows, Cols: in, Stride: in, Data: x},
		blas64.General{Rows: out, Cols: in, Stride: in, Data: w},
		0, blas64.General{Rows: rows, Cols: out, Stride: out, Data: y})
	return y
}

// RMSNorm normalises each row of n values by its root mean square (HF Qwen3_5RMSNorm and,
// with zeroCentred false, the plain-gain form):
//
//	y = x · rsqrt(mean(x²) + eps) · (1 + w)   when zeroCentred (every Qwen3.5 RMSNorm:
//	                                          input, post-attention, final, q_norm, k_norm)
//	y = x · rsqrt(mean(x²) + eps) · w         otherwise
//
// x is [rows, n] row-major, w is [n]; it returns y [rows, n].
// Errors: non-positive sizes, eps not finite and ≥ 0, or lengths that disagree.
func RMSNorm(x []float64, rows, n int, w []float64, eps float64, zeroCentred bool) ([]float64, error) {
	if err := rmsNormCheck("RMSNorm", x, rows, n, w, eps); err != nil {
		return nil, err
	}
	return rmsNorm(x, rows, n, w, eps, zeroCentred), nil
}

// rmsNormCheck checks the arguments of RMSNorm and of its backward, named op in the error.
func rmsNormCheck(op string, x []float64, rows, n int, w []float64, eps float64) error {
	if err := checkPos(op, "rows, n", rows, n); err != nil {
		return err
	}
	if err := checkLens(op, lenCheck{"x", x, rows * n, "rows·n"}, lenCheck{"w", w, n, "n"}); err != nil {
		return err
	}
	return checkEps(op, eps)
}

func rmsNorm(x []float64, rows, n int, w []float64, eps float64, zeroCentred bool) []float64 {
	y := make([]float64, len(x))
	off := 0.0
	if zeroCentred {
		off = 1
	}
	for r := 0; r < rows; r++ {
		xr, yr := x[r*n:(r+1)*n], y[r*n:(r+1)*n]
		var ss float64
		for _, v := range xr {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(n)+eps)
		for i, v := range xr {
			yr[i] = v * inv * (off + w[i])
		}
	}
	return y
}

// RoPEInvFreq returns the rot/2 inverse frequencies of the default RoPE,
// inv_freq_i = θ^(−2i/rot) (HF compute_default_rope_parameters with dim = rot).
func RoPEInvFreq(rot int, theta float64) []float64 {
	f := make([]float64, rot/2)
	for i := range f {
		f[i] = math.Pow(theta, -float64(2*i)/float64(rot))
	}
	return f
}

// QKNormRoPE applies the per-head query/key norm and then partial rotary position
// embedding, as HF Qwen3_5Attention does to queries (q_norm) and keys (k_norm):
//
//  1. per head, over headDim: x ← x · rsqrt(mean(x²) + eps) · (1 + w)   (zero-centred gain);
//  2. RoPE on the first rot dims of every head, rotate-half pairing (dim i with i + rot/2,
//     i < rot/2), with angle p·inv_freq_i, inv_freq_i = θ^(−2i/rot), p the position within
//     the window (row r has p = r mod t):
//     y_i       = x_i·cos − x_{i+rot/2}·sin
//     y_{i+rot/2} = x_{i+rot/2}·cos + x_i·sin
//     dims rot…headDim−1 pass through (after the norm) unchanged.
//
// x is [nb·t, heads, headDim] row-major (rows = nb·t tokens, windows of t), w is [headDim].
// It returns y of the same shape. Errors: non-positive sizes, rows not a multiple of t, rot
// odd or outside [2, headDim], θ not positive, lengths that disagree.
func QKNormRoPE(x []float64, rows, heads, headDim int, w []float64, eps float64, rot int, theta float64, t int) ([]float64, error) {
	if err := qkNormRoPECheck("QKNormRoPE", x, rows, heads, headDim, w, eps, rot, theta, t); err != nil {
		return nil, err
	}
	return qkNormRoPE(x, rows, heads, headDim, w, eps, rot, theta, t), nil
}

// qkNormRoPECheck checks the arguments of QKNormRoPE and of its backward, named op in the
// error.
func qkNormRoPECheck(op string, x []float64, rows, heads, headDim int, w []float64, eps float64, rot int, theta float64, t int) error {
	if err := checkPos(op, "rows, heads, headDim, t", rows, heads, headDim, t); err != nil {
		return err
	}
	if rows%t != 0 {
		return fmt.Errorf("host.%s: rows %d is not a multiple of the window length t = %d", op, rows, t)
	}
	if rot < 2 || rot%2 != 0 || rot > headDim {
		return fmt.Errorf("host.%s: rotary dims %d must be even and in [2, headDim = %d]", op, rot, headDim)
	}
	if !(theta > 0) || math.IsInf(theta, 0) {
		return fmt.Errorf("host.%s: theta %g must be positive and finite", op, theta)
	}
	if err := checkEps(op, eps); err != nil {
		return err
	}
	return checkLens(op, lenCheck{"x", x, rows * heads * headDim, "rows·heads·headDim"}, lenCheck{"w", w, headDim, "headDim"})
}

func qkNormRoPE(x []float64, rows, heads, headDim int, w []float64, eps float64, rot int, theta float64, t int) []float64 {
	y := rmsNorm(x, rows*heads, headDim, w, eps, true)
	inv := RoPEInvFreq(rot, theta)
	half := rot / 2
	cs := make([]float64, half)
	sn := make([]float64, half)
	for r := 0; r < rows; r++ {
		p := float64(r % t)
		for i := range half {
			cs[i], sn[i] = math.Cos(p*inv[i]), math.Sin(p*inv[i])
		}
		for h := 0; h < heads; h++ {
			v := y[(r*heads+h)*headDim:]
			for i := range half {
				a, b := v[i], v[i+half]
				v[i] = a*cs[i] - b*sn[i]
				v[i+half] = b*cs[i] + a*sn[i]
			}
		}
	}
	return y
}

// SplitQueryGate splits the output of a Qwen3.5 gated-attention q_proj into the query and
// the output gate. Per token and per head the q_proj row holds first headDim query values
// and then headDim gate values (interleaved per head — not the two halves of the row; HF
// `torch.chunk(q_proj(x).view(..., heads, 2·headDim), 2, dim=-1)`).
//
// qg is [rows, heads, 2·headDim]; it returns q and gate, each [rows, heads, headDim].
// Errors: non-positive sizes or len(qg) ≠ rows·heads·2·headDim.
func SplitQueryGate(qg []float64, rows, heads, headDim int) (q, gate []float64, err error) {
	if err := checkPos("SplitQueryGate", "rows, heads, headDim", rows, heads, headDim); err != nil {
		return nil, nil, err
	}
	if err := checkLen("SplitQueryGate", "qg", qg, rows*heads*2*headDim, "rows·heads·2·headDim"); err != nil {
		return nil, nil, err
	}
	q = make([]float64, rows*heads*headDim)
	gate = make([]float64, rows*heads*headDim)
	for rh := 0; rh < rows*heads; rh++ {
		src := qg[rh*2*headDim:]
		copy(q[rh*headDim:(rh+1)*headDim], src[:headDim])
		copy(gate[rh*headDim:(rh+1)*headDim], src[headDim:2*headDim])
	}
	return q, gate, nil
}

// Attention is causal softmax attention with grouped-query heads (HF eager attention of
// Qwen3_5Attention, no dropout, no mask other than causality within each window):
//
//	s_ij = (q_i · k_j) · headDim^−½ for j ≤ i (same window), lse_i = log Σ_j exp(s_ij),
//	out_i = Σ_j exp(s_ij − lse_i) · v_j,
//
// where query head h uses KV head h / (nh/nkv).
//
// q is [nb·t, nh, headDim], k and v are [nb·t, nkv, headDim] (windows of t tokens, no
// attention across windows). It returns out [nb·t, nh, headDim] and lse [nb·t, nh] (the
// natural-log log-sum-exp of each row's scaled scores, for the backward).
// Errors: non-positive sizes, nh not a multiple of nkv, lengths that disagree.
func Attention(q, k, v []float64, nb, t, nh, nkv, headDim int) (out, lse []float64, err error) {
	if err := attentionCheck("Attention", q, k, v, nb, t, nh, nkv, headDim); err != nil {
		return nil, nil, err
	}
	out, lse = attention(q, k, v, nb, t, nh, nkv, headDim)
	return out, lse, nil
}

// attentionCheck checks the arguments of Attention and of its backward, named op in the
// error.
func attentionCheck(op string, q, k, v []float64, nb, t, nh, nkv, headDim int) error {
	if err := checkPos(op, "nb, t, nh, nkv, headDim", nb, t, nh, nkv, headDim); err != nil {
		return err
	}
	if nh%nkv != 0 {
		return fmt.Errorf("host.%s: nh = %d query heads is not a multiple of nkv = %d KV heads", op, nh, nkv)
	}
	rows := nb * t
	return checkLens(op, lenCheck{"q", q, rows * nh * headDim, "nb·t·nh·headDim"}, lenCheck{"k", k, rows * nkv * headDim, "nb·t·nkv·headDim"},
		lenCheck{"v", v, rows * nkv * headDim, "nb·t·nkv·headDim"})
}

func attention(q, k, v []float64, nb, t, nh, nkv, hd int) (out, lse []float64) {
	out = make([]float64, nb*t*nh*hd)
	lse = make([]float64, nb*t*nh)
	scale := 1 / math.Sqrt(float64(hd))
	group := nh / nkv
	parallelFor(nb*nh, func(job int) {
		b, h := job/nh, job%nh
		kh := h / group
		s := make([]float64, t)
		for i := 0; i < t; i++ {
			qi := q[((b*t+i)*nh+h)*hd:][:hd]
			m := math.Inf(-1)
			for j := 0; j <= i; j++ {
				kj := k[((b*t+j)*nkv+kh)*hd:][:hd]
				var d float64
				for c, x := range qi {
					d += x * kj[c]
				}
				s[j] = d * scale
				if s[j] > m {
					m = s[j]
				}
			}
			var sum float64
			for j := 0; j <= i; j++ {
				sum += math.Exp(s[j] - m)
			}
			l := m + math.Log(sum)
			lse[(b*t+i)*nh+h] = l
			oi := out[((b*t+i)*nh+h)*hd:][:hd]
			for j := 0; j <= i; j++ {
				p := math.Exp(s[j] - l)
				vj := v[((b*t+j)*nkv+kh)*hd:][:hd]
				for c := range oi {
					oi[c] += p * vj[c]
				}
			}
		}
	})
	return out, lse
}

// AttentionGate is the output gate of Qwen3.5 gated attention: y = o ⊙ sigmoid(gate),
// elementwise over equal-length slices (both [rows, nh·headDim] in the model).
// Errors: lengths differ.
func AttentionGate(o, gate []float64) ([]float64, error) {
	if len(o) != len(gate) {
		return nil, fmt.Errorf("host.AttentionGate: o has %d values but gate has %d", len(o), len(gate))
	}
	y := make([]float64, len(o))
	for i := range o {
		y[i] = o[i] * sigmoid(gate[i])
	}
	return y, nil
}

// CausalConv1dSiLU is the depthwise causal convolution of the GatedDeltaNet followed by SiLU
// (HF `F.silu(conv1d(x)[..., :t])`, conv1d with groups = channels, padding K−1, no bias):
//
//	y[r=(b,τ), c] = silu( Σ_{i<K} w[c,i] · x[(b, τ−K+1+i), c] ),
//
// with x taken as zero for τ−K+1+i < 0: left zero padding inside every window, so nothing
// leaks from window b−1 into window b.
//
// x is [nb·t, channels] row-major (token-major, as a Linear produces it), w is [channels, 1,
// K] (HF conv1d.weight) flattened to [channels·K]. It returns y [nb·t, channels].
// Errors: non-positive sizes or lengths that disagree.
func CausalConv1dSiLU(x []float64, nb, t, channels int, w []float64, K int) ([]float64, error) {
	if err := causalConvCheck("CausalConv1dSiLU", x, nb, t, channels, w, K); err != nil {
		return nil, err
	}
	y := make([]float64, len(x))
	for b := 0; b < nb; b++ {
		for tau := 0; tau < t; tau++ {
			yr := y[(b*t+tau)*channels:][:channels]
			for i := 0; i < K; i++ {
				src := tau - K + 1 + i
				if src < 0 {
					continue
				}
				xr := x[(b*t+src)*channels:][:channels]
				for c := range yr {
					yr[c] += w[c*K+i] * xr[c]
				}
			}
			for c, s := range yr {
				yr[c] = silu(s)
			}
		}
	}
	return y, nil
}

// causalConvCheck checks the arguments of CausalConv1dSiLU and of its backward, named op in
// the error.
func causalConvCheck(op string, x []float64, nb, t, channels int, w []float64, K int) error {
	if err := checkPos(op, "nb, t, channels, K", nb, t, channels, K); err != nil {
		return err
	}
	return checkLens(op, lenCheck{"x", x, nb * t * channels, "nb·t·channels"}, lenCheck{"w", w, channels * K, "channels·1·K"})
}

// GatedDeltaGates computes the per-token, per-value-head gates of the GatedDeltaNet
// (HF Qwen3_5GatedDeltaNet):
//
//	β = sigmoid(b),   g = −exp(A_log) · softplus(a + dt_bias)   (g ≤ 0 is a log decay).
//
// a and b are [rows, hv] (outputs of in_proj_a and in_proj_b), aLog and dtBias are [hv].
// It returns g and beta, each [rows, hv]. Errors: non-positive sizes or lengths that disagree.
func GatedDeltaGates(a, b []float64, rows, hv int, aLog, dtBias []float64) (g, beta []float64, err error) {
	if err := gatedDeltaGatesCheck("GatedDeltaGates", a, b, rows, hv, aLog, dtBias); err != nil {
		return nil, nil, err
	}
	g = make([]float64, rows*hv)
	beta = make([]float64, rows*hv)
	for r := 0; r < rows; r++ {
		for j := 0; j < hv; j++ {
			i := r*hv + j
			beta[i] = sigmoid(b[i])
			g[i] = -math.Exp(aLog[j]) * softplus(a[i]+dtBias[j])
		}
	}
	return g, beta, nil
}

// gatedDeltaGatesCheck checks the arguments of GatedDeltaGates and of its backward, named op
// in the error.
func gatedDeltaGatesCheck(op string, a, b []float64, rows, hv int, aLog, dtBias []float64) error {
	if err := checkPos(op, "rows, hv", rows, hv); err != nil {
		return err
	}
	return checkLens(op, lenCheck{"a", a, rows * hv, "rows·hv"}, lenCheck{"b", b, rows * hv, "rows·hv"},
		lenCheck{"aLog", aLog, hv, "hv"}, lenCheck{"dtBias", dtBias, hv, "hv"})
}

// L2Norm normalises each row of n values to unit L2 norm and scales it:
// y = scale · x · rsqrt(Σx² + L2NormEps) (HF `l2norm`, eps 1e-6). The GatedDeltaNet uses it
// per head on keys (scale 1) and queries (scale dk^−½, HF's `query * 1/sqrt(dk)` after the
// norm).
//
// x is [rows, n] row-major (rows = tokens·heads); it returns y [rows, n].
// Errors: non-positive sizes, scale not finite, or len(x) ≠ rows·n.
func L2Norm(x []float64, rows, n int, scale float64) ([]float64, error) {
	if err := l2NormCheck("L2Norm", x, rows, n, scale); err != nil {
		return nil, err
	}
	y := make([]float64, len(x))
	for r := 0; r < rows; r++ {
		xr := x[r*n : (r+1)*n]
		var ss float64
		for _, v := range xr {
			ss += v * v
		}
		f := scale / math.Sqrt(ss+L2NormEps)
		for i, v := range xr {
			y[r*n+i] = v * f
		}
	}
	return y, nil
}

// l2NormCheck checks the arguments of L2Norm and of its backward, named op in the error.
func l2NormCheck(op string, x []float64, rows, n int, scale float64) error {
	if err := checkPos(op, "rows, n", rows, n); err != nil {
		return err
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) {
		return fmt.Errorf("host.%s: scale %g is not finite", op, scale)
	}
	return checkLen(op, "x", x, rows*n, "rows·n")
}

// GatedDeltaRule is the gated delta-rule recurrence of the GatedDeltaNet, token by token
// (DESIGN.md §3; HF torch_recurrent_gated_delta_rule, which the chunked form equals). For
// every window and value head j, with key head kh = j / (hv/hk) and state S ∈ R^{dk×dv}
// starting from zero at the window's first token:
//
//	S ← e^{g_t} · S
//	S ← S + k_t ⊗ β_t (v_t − Sᵀ k_t)
//	o_t = Sᵀ q_t
//
// q and k are [nb·t, hk, dk] (already L2-normalised; q already scaled by dk^−½), v is
// [nb·t, hv, dv], g and beta are [nb·t, hv]. It returns o [nb·t, hv, dv] and, when
// wantState, the final states [nb, hv, dk, dv] (S[r,c] at index ((b·hv + j)·dk + r)·dv + c);
// otherwise state is nil.
// Errors: non-positive sizes, hv not a multiple of hk, lengths that disagree.
func GatedDeltaRule(q, k, v, g, beta []float64, nb, t, hk, hv, dk, dv int, wantState bool) (o, state []float64, err error) {
	if err := gatedDeltaRuleCheck("GatedDeltaRule", q, k, v, g, beta, nb, t, hk, hv, dk, dv); err != nil {
		return nil, nil, err
	}
	rows := nb * t
	o = make([]float64, rows*hv*dv)
	if wantState {
		state = make([]float64, nb*hv*dk*dv)
	}
	group := hv / hk
	parallelFor(nb*hv, func(job int) {
		b, j := job/hv, job%hv
		kh := j / group
		S := make([]float64, dk*dv)
		u := make([]float64, dv)
		for tau := 0; tau < t; tau++ {
			r := b*t + tau
			decay := math.Exp(g[r*hv+j])
			bt := beta[r*hv+j]
			kt := k[(r*hk+kh)*dk:][:dk]
			qt := q[(r*hk+kh)*dk:][:dk]
			vt := v[(r*hv+j)*dv:][:dv]
			// S ← e^g·S and u = β(v − Sᵀk) in one pass over S.
			copy(u, vt)
			for a := 0; a < dk; a++ {
				ka := kt[a]
				row := S[a*dv:][:dv]
				for c := range row {
					row[c] *= decay
					u[c] -= ka * row[c]
				}
			}
			for c := range u {
				u[c] *= bt
			}
			// S += k ⊗ u and o = Sᵀq in one pass over S.
			ot := o[(r*hv+j)*dv:][:dv]
			for a := 0; a < dk; a++ {
				ka, qa := kt[a], qt[a]
				row := S[a*dv:][:dv]
				for c := range row {
					row[c] += ka * u[c]
					ot[c] += qa * row[c]
				}
			}
		}
		if wantState {
			copy(state[(b*hv+j)*dk*dv:][:dk*dv], S)
		}
	})
	return o, state, nil
}

// gatedDeltaRuleCheck checks the arguments of GatedDeltaRule and of its backward, named op in
// the error.
func gatedDeltaRuleCheck(op string, q, k, v, g, beta []float64, nb, t, hk, hv, dk, dv int) error {
	if err := checkPos(op, "nb, t, hk, hv, dk, dv", nb, t, hk, hv, dk, dv); err != nil {
		return err
	}
	if hv%hk != 0 {
		return fmt.Errorf("host.%s: hv = %d value heads is not a multiple of hk = %d key heads", op, hv, hk)
	}
	rows := nb * t
	return checkLens(op, lenCheck{"q", q, rows * hk * dk, "nb·t·hk·dk"}, lenCheck{"k", k, rows * hk * dk, "nb·t·hk·dk"},
		lenCheck{"v", v, rows * hv * dv, "nb·t·hv·dv"}, lenCheck{"g", g, rows * hv, "nb·t·hv"}, lenCheck{"beta", beta, rows * hv, "nb·t·hv"})
}

// GatedRMSNorm is the gated norm of the GatedDeltaNet (HF Qwen3NextRMSNormGated), per value
// head over dv with a plain gain (not 1 + w):
//
//	y = w ⊙ x · rsqrt(mean(x²) + eps) ⊙ silu(z).
//
// x and z are [rows, hv, dv], w is [dv]; it returns y [rows, hv, dv].
// Errors: non-positive sizes, eps not finite and ≥ 0, or lengths that disagree.
func GatedRMSNorm(x, z []float64, rows, hv, dv int, w []float64, eps float64) ([]float64, error) {
	if err := gatedRMSNormCheck("GatedRMSNorm", x, z, rows, hv, dv, w, eps); err != nil {
		return nil, err
	}
	y := rmsNorm(x, rows*hv, dv, w, eps, false)
	for i := range y {
		y[i] *= silu(z[i])
	}
	return y, nil
}

// gatedRMSNormCheck checks the arguments of GatedRMSNorm and of its backward, named op in the
// error.
func gatedRMSNormCheck(op string, x, z []float64, rows, hv, dv int, w []float64, eps float64) error {
	if err := checkPos(op, "rows, hv, dv", rows, hv, dv); err != nil {
		return err
	}
	if err := checkEps(op, eps); err != nil {
		return err
	}
	return checkLens(op, lenCheck{"x", x, rows * hv * dv, "rows·hv·dv"}, lenCheck{"z", z, rows * hv * dv, "rows·hv·dv"}, lenCheck{"w", w, dv, "dv"})
}

// SwiGLU is the MLP activation: y = silu(gate) ⊙ up, elementwise over equal-length slices
// ([rows, intermediate] in the model). Errors: lengths differ.
func SwiGLU(gate, up []float64) ([]float64, error) {
	if len(gate) != len(up) {
		return nil, fmt.Errorf("host.SwiGLU: gate has %d values but up has %d", len(gate), len(up))
	}
	y := make([]float64, len(gate))
	for i := range gate {
		y[i] = silu(gate[i]) * up[i]
	}
	return y, nil
}

// ResidualAdd returns x + d elementwise (the residual stream update). Errors: lengths differ.
func ResidualAdd(x, d []float64) ([]float64, error) {
	if len(x) != len(d) {
		return nil, fmt.Errorf("host.ResidualAdd: x has %d values but d has %d", len(x), len(d))
	}
	y := make([]float64, len(x))
	for i := range x {
		y[i] = x[i] + d[i]
	}
	return y, nil
}

// LogSumExp returns, for each row of logits [rows, n], log Σ_j exp(x_j), computed as
// m + log Σ exp(x_j − m) with m the row maximum (−Inf for a row of −Inf; NaN in, NaN out).
// Errors: non-positive sizes or len(logits) ≠ rows·n.
func LogSumExp(logits []float64, rows, n int) ([]float64, error) {
	if err := checkPos("LogSumExp", "rows, n", rows, n); err != nil {
		return nil, err
	}
	if err := checkLen("LogSumExp", "logits", logits, rows*n, "rows·n"); err != nil {
		return nil, err
	}
	out := make([]float64, rows)
	for r := range out {
		out[r] = logSumExp(logits[r*n : (r+1)*n])
	}
	return out, nil
}

func logSumExp(x []float64) float64 {
	m, ls := maxLogSum(x)
	return m + ls
}

// maxLogSum returns the row maximum m and log Σ exp(x − m), so that x − LogSumExp(x) can
// be formed as (x − m) − ls without the rounding of m + ls (m = ±Inf or NaN: ls = 0).
func maxLogSum(x []float64) (m, ls float64) {
	m = math.Inf(-1)
	for _, v := range x {
		if math.IsNaN(v) {
			return v, 0
		}
		if v > m {
			m = v
		}
	}
	if math.IsInf(m, 0) {
		return m, 0
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v - m)
	}
	return m, math.Log(s)
}

// LogSoftmax returns y = x − LogSumExp(x) per row of logits [rows, n] (natural log
// probabilities), shape [rows, n], formed as (x − max) − log Σ exp(x − max).
// Errors: non-positive sizes or len(logits) ≠ rows·n.
func LogSoftmax(logits []float64, rows, n int) ([]float64, error) {
	if err := checkPos("LogSoftmax", "rows, n", rows, n); err != nil {
		return nil, err
	}
	if err := checkLen("LogSoftmax", "logits", logits, rows*n, "rows·n"); err != nil {
		return nil, err
	}
	y := make([]float64, len(logits))
	for r := 0; r < rows; r++ {
		x := logits[r*n : (r+1)*n]
		m, ls := maxLogSum(x)
		for j, v := range x {
			y[r*n+j] = (v - m) - ls
		}
	}
	return y, nil
}

// TopK returns, per row of logits [rows, n], the k largest entries in descending order as
// ids [rows, k] (column indices) and their log-probabilities logprobs [rows, k]
// (logit − LogSumExp of the full row). Equal logits are ordered by the lower id first.
// Errors: non-positive sizes, k > n, len(logits) ≠ rows·n, or a NaN logit (named by row
// and column).
func TopK(logits []float64, rows, n, k int) (ids []int, logprobs []float64, err error) {
	if err := checkPos("TopK", "rows, n, k", rows, n, k); err != nil {
		return nil, nil, err
	}
	if k > n {
		return nil, nil, fmt.Errorf("host.TopK: k = %d exceeds the row length n = %d", k, n)
	}
	if err := checkLen("TopK", "logits", logits, rows*n, "rows·n"); err != nil {
		return nil, nil, err
	}
	ids = make([]int, rows*k)
	logprobs = make([]float64, rows*k)
	for r := 0; r < rows; r++ {
		x := logits[r*n : (r+1)*n]
		for j, v := range x {
			if math.IsNaN(v) {
				return nil, nil, fmt.Errorf("host.TopK: logits[%d, %d] is NaN", r, j)
			}
		}
		topKRow(x, k, ids[r*k:(r+1)*k])
		m, ls := maxLogSum(x)
		for i, id := range ids[r*k : (r+1)*k] {
			logprobs[r*k+i] = (x[id] - m) - ls
		}
	}
	return ids, logprobs, nil
}

// topKRow fills dst (len k) with the ids of the k largest x, descending, ties by lower id.
func topKRow(x []float64, k int, dst []int) {
	n := 0 // entries filled, dst[:n] sorted best first
	better := func(a, b int) bool { return x[a] > x[b] || (x[a] == x[b] && a < b) }
	for j := range x {
		if n == k && !better(j, dst[k-1]) {
			continue
		}
		pos := n
		if n < k {
			n++
		} else {
			pos = k - 1
		}
		for pos > 0 && better(j, dst[pos-1]) {
			dst[pos] = dst[pos-1]
			pos--
		}
		dst[pos] = j
	}
}
