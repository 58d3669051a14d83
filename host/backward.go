package host

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// This file holds the backward (vector–Jacobian product) of every op of ops.go, named
// <Op>Backward, in float64: the oracle the GPU backward kernels are parity-tested against.
// Each takes the op's forward inputs (recomputing what it needs) and the gradient dy of a
// scalar loss with respect to the op's output, and returns the gradients with respect to
// the inputs that are trained or that lie on the path to trained values. Sizes and layouts
// are those of the forward op; every result is a fresh slice. Each is checked against
// central finite differences of its forward in backward_test.go.

// deltaRuleChunk is the number of tokens between the state checkpoints that
// GatedDeltaRuleBackward keeps; the states inside a chunk are recomputed from its
// checkpoint.
const deltaRuleChunk = 16

// dsilu is d silu(x)/dx = σ(x)·(1 + x·(1 − σ(x))).
func dsilu(x float64) float64 {
	s := sigmoid(x)
	return s * (1 + x*(1-s))
}

// LinearOpBackward is the backward of LinearOp (y = x·Wᵀ) for a frozen weight: it returns
// dx = dy·W, [rows, in] row-major, for dy [rows, out] and w [out, in] row-major (no weight
// gradient: dense projections are frozen in the student, DESIGN.md §6).
// Errors: non-positive sizes or lengths that disagree.
func LinearOpBackward(dy []float64, rows, in int, w []float64, out int) ([]float64, error) {
	if err := checkPos("LinearOpBackward", "rows, in, out", rows, in, out); err != nil {
		return nil, err
	}
	if err := checkLens("LinearOpBackward", lenCheck{"dy", dy, rows * out, "rows·out"}, lenCheck{"w", w, out * in, "out·in"}); err != nil {
		return nil, err
	}
	return gemmDyW(dy, rows, out, w, in), nil
}

// gemmDyW returns dy·w for dy [rows, out] and w [out, in] (sizes already checked).
func gemmDyW(dy []float64, rows, out int, w []float64, in int) []float64 {
	dx := make([]float64, rows*in)
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1,
		blas64.General{Rows: rows, Cols: out, Stride: out, Data: dy},
		blas64.General{Rows: out, Cols: in, Stride: in, Data: w},
		0, blas64.General{Rows: rows, Cols: in, Stride: in, Data: dx})
	return dx
}

// RMSNormBackward is the backward of RMSNorm. With inv = (mean(x²) + eps)^−½ and γ = 1 + w
// (zeroCentred) or γ = w, per row of n values:
//
//	dx_i = inv·γ_i·dy_i − inv³·x_i·(1/n)·Σ_j γ_j·dy_j·x_j,   dw_i = Σ_rows dy_i·x_i·inv
//
// (dγ = dw in both gain styles). x and dy are [rows, n], w is [n]; it returns dx [rows, n]
// and dw [n]. Errors as RMSNorm, plus len(dy) ≠ rows·n.
func RMSNormBackward(x []float64, rows, n int, w []float64, eps float64, zeroCentred bool, dy []float64) (dx, dw []float64, err error) {
	if err := rmsNormCheck("RMSNormBackward", x, rows, n, w, eps); err != nil {
		return nil, nil, err
	}
	if err := checkLen("RMSNormBackward", "dy", dy, rows*n, "rows·n"); err != nil {
		return nil, nil, err
	}
	dx, dw = rmsNormBackward(x, rows, n, w, eps, zeroCentred, dy)
	return dx, dw, nil
}

func rmsNormBackward(x []float64, rows, n int, w []float64, eps float64, zeroCentred bool, dy []float64) (dx, dw []float64) {
	off := 0.0
	if zeroCentred {
		off = 1
	}
	dx = make([]float64, len(x))
	dw = make([]float64, n)
	for r := 0; r < rows; r++ {
		xr, dyr, dxr := x[r*n:(r+1)*n], dy[r*n:(r+1)*n], dx[r*n:(r+1)*n]
		var ss, dot float64
		for i, v := range xr {
			ss += v * v
			dot += (off + w[i]) * dyr[i] * v
		}
		inv := 1 / math.Sqrt(ss/float64(n)+eps)
		c := inv * inv * inv * dot / float64(n)
		for i, v := range xr {
			dxr[i] = inv*(off+w[i])*dyr[i] - c*v
			dw[i] += dyr[i] * v * inv
		}
	}
	return dx, dw
}

// QKNormRoPEBackward is the backward of QKNormRoPE: the rotation is orthogonal, so dy is
// first rotated back (angle −p·inv_freq_i on the pairs (i, i + rot/2), i < rot/2; the other
// dims pass through), then RMSNormBackward of the zero-centred per-head norm is applied.
// x and dy are [rows, heads, headDim], w is [headDim]; it returns dx [rows, heads, headDim]
// and dw [headDim] (summed over rows and heads). Errors as QKNormRoPE, plus a dy length
// that disagrees.
func QKNormRoPEBackward(x []float64, rows, heads, headDim int, w []float64, eps float64, rot int, theta float64, t int, dy []float64) (dx, dw []float64, err error) {
	const op = "QKNormRoPEBackward"
	if err := qkNormRoPECheck(op, x, rows, heads, headDim, w, eps, rot, theta, t); err != nil {
		return nil, nil, err
	}
	if err := checkLen(op, "dy", dy, rows*heads*headDim, "rows·heads·headDim"); err != nil {
		return nil, nil, err
	}
	inv := RoPEInvFreq(rot, theta)
	half := rot / 2
	dn := append([]float64(nil), dy...)
	for r := 0; r < rows; r++ {
		p := float64(r % t)
		for i := range half {
			cs, sn := math.Cos(p*inv[i]), math.Sin(p*inv[i])
			for h := 0; h < heads; h++ {
				v := dn[(r*heads+h)*headDim:]
				a, b := v[i], v[i+half]
				v[i] = a*cs + b*sn
				v[i+half] = b*cs - a*sn
			}
		}
	}
	dx, dw = rmsNormBackward(x, rows*heads, headDim, w, eps, true, dn)
	return dx, dw, nil
}

// AttentionBackward is the backward of Attention from its kept log-sum-exp (FlashAttention-2
// style; no score matrix is stored): with p_ij = exp(s_ij − lse_i) for j ≤ i in the same
// window, D_i = dout_i · out_i and s = scale·q·k, scale = headDim^−½,
//
//	dv_j = Σ_i p_ij·dout_i,  ds_ij = p_ij·(dout_i·v_j − D_i),
//	dq_i = scale·Σ_j ds_ij·k_j,  dk_j = scale·Σ_i ds_ij·q_i,
//
// dk and dv summed over the nh/nkv query heads that share a KV head.
// q, out and dout are [nb·t, nh, headDim], k and v [nb·t, nkv, headDim], lse [nb·t, nh] (as
// Attention returns them). It returns dq [nb·t, nh, headDim], dk and dv
// [nb·t, nkv, headDim]. Errors: as Attention, plus out, lse or dout lengths that disagree.
func AttentionBackward(q, k, v, out, lse, dout []float64, nb, t, nh, nkv, headDim int) (dq, dk, dv []float64, err error) {
	const op = "AttentionBackward"
	if err := attentionCheck(op, q, k, v, nb, t, nh, nkv, headDim); err != nil {
		return nil, nil, nil, err
	}
	rows := nb * t
	if err := checkLens(op, lenCheck{"out", out, rows * nh * headDim, "nb·t·nh·headDim"}, lenCheck{"lse", lse, rows * nh, "nb·t·nh"},
		lenCheck{"dout", dout, rows * nh * headDim, "nb·t·nh·headDim"}); err != nil {
		return nil, nil, nil, err
	}
	hd := headDim
	dq = make([]float64, len(q))
	dk = make([]float64, len(k))
	dv = make([]float64, len(v))
	scale := 1 / math.Sqrt(float64(hd))
	group := nh / nkv
	// One job per (window, KV head): its query heads run one after the other, so the
	// accumulation into dk and dv never races.
	parallelFor(nb*nkv, func(job int) {
		b, kh := job/nkv, job%nkv
		for h := kh * group; h < (kh+1)*group; h++ {
			for i := 0; i < t; i++ {
				ri := (b*t+i)*nh + h
				qi, oi, doi := q[ri*hd:][:hd], out[ri*hd:][:hd], dout[ri*hd:][:hd]
				dqi := dq[ri*hd:][:hd]
				var D float64
				for c := range doi {
					D += doi[c] * oi[c]
				}
				l := lse[ri]
				for j := 0; j <= i; j++ {
					rj := (b*t+j)*nkv + kh
					kj, vj := k[rj*hd:][:hd], v[rj*hd:][:hd]
					dkj, dvj := dk[rj*hd:][:hd], dv[rj*hd:][:hd]
					var s, dp float64
					for c := range qi {
						s += qi[c] * kj[c]
						dp += doi[c] * vj[c]
					}
					p := math.Exp(s*scale - l)
					ds := p * (dp - D) * scale
					for c := range qi {
						dvj[c] += p * doi[c]
						dqi[c] += ds * kj[c]
						dkj[c] += ds * qi[c]
					}
				}
			}
		}
	})
	return dq, dk, dv, nil
}

// AttentionGateBackward is the backward of AttentionGate (y = o ⊙ σ(gate)):
// do = dy ⊙ σ(gate), dgate = dy ⊙ o ⊙ σ(gate)·(1 − σ(gate)). All slices have one length.
// Errors: lengths differ.
func AttentionGateBackward(o, gate, dy []float64) (do, dgate []float64, err error) {
	if len(o) != len(gate) || len(o) != len(dy) {
		return nil, nil, fmt.Errorf("host.AttentionGateBackward: o, gate and dy have %d, %d and %d values, want one length", len(o), len(gate), len(dy))
	}
	do = make([]float64, len(o))
	dgate = make([]float64, len(o))
	for i := range o {
		s := sigmoid(gate[i])
		do[i] = dy[i] * s
		dgate[i] = dy[i] * o[i] * s * (1 - s)
	}
	return do, dgate, nil
}

// CausalConv1dSiLUBackward is the backward of CausalConv1dSiLU with respect to x only (the
// conv weight is frozen in the student). With s the pre-activation (recomputed from x) and
// ds = dy ⊙ silu′(s), silu′(s) = σ(s)·(1 + s·(1 − σ(s))):
//
//	dx[(b, τ′), c] = Σ_{i<K, τ = τ′+K−1−i < t} w[c,i] · ds[(b, τ), c],
//
// never crossing a window boundary. x and dy are [nb·t, channels], w is [channels·K]; it
// returns dx [nb·t, channels]. Errors as CausalConv1dSiLU, plus len(dy) ≠ nb·t·channels.
func CausalConv1dSiLUBackward(x []float64, nb, t, channels int, w []float64, K int, dy []float64) ([]float64, error) {
	if err := causalConvCheck("CausalConv1dSiLUBackward", x, nb, t, channels, w, K); err != nil {
		return nil, err
	}
	if err := checkLen("CausalConv1dSiLUBackward", "dy", dy, nb*t*channels, "nb·t·channels"); err != nil {
		return nil, err
	}
	dx := make([]float64, len(x))
	s := make([]float64, channels)
	for b := 0; b < nb; b++ {
		for tau := 0; tau < t; tau++ {
			clear(s)
			for i := 0; i < K; i++ {
				src := tau - K + 1 + i
				if src < 0 {
					continue
				}
				xr := x[(b*t+src)*channels:][:channels]
				for c := range s {
					s[c] += w[c*K+i] * xr[c]
				}
			}
			dyr := dy[(b*t+tau)*channels:][:channels]
			for c := range s {
				s[c] = dyr[c] * dsilu(s[c])
			}
			for i := 0; i < K; i++ {
				src := tau - K + 1 + i
				if src < 0 {
					continue
				}
				dxr := dx[(b*t+src)*channels:][:channels]
				for c := range s {
					dxr[c] += w[c*K+i] * s[c]
				}
			}
		}
	}
	return dx, nil
}

// GatedDeltaGatesBackward is the backward of GatedDeltaGates with respect to a and b
// (A_log and dt_bias are frozen): with β = σ(b) and g = −exp(A_log)·softplus(a + dt_bias),
//
//	db = dβ ⊙ β(1 − β),   da = −dg ⊙ exp(A_log) ⊙ σ(a + dt_bias).
//
// a, b, dg and dbeta are [rows, hv], aLog and dtBias [hv]; it returns da and db, each
// [rows, hv]. Errors as GatedDeltaGates, plus dg or dbeta lengths that disagree.
func GatedDeltaGatesBackward(a, b []float64, rows, hv int, aLog, dtBias, dg, dbeta []float64) (da, db []float64, err error) {
	const op = "GatedDeltaGatesBackward"
	if err := gatedDeltaGatesCheck(op, a, b, rows, hv, aLog, dtBias); err != nil {
		return nil, nil, err
	}
	if err := checkLens(op, lenCheck{"dg", dg, rows * hv, "rows·hv"}, lenCheck{"dbeta", dbeta, rows * hv, "rows·hv"}); err != nil {
		return nil, nil, err
	}
	da = make([]float64, rows*hv)
	db = make([]float64, rows*hv)
	for r := 0; r < rows; r++ {
		for j := 0; j < hv; j++ {
			i := r*hv + j
			s := sigmoid(b[i])
			db[i] = dbeta[i] * s * (1 - s)
			da[i] = -dg[i] * math.Exp(aLog[j]) * sigmoid(a[i]+dtBias[j])
		}
	}
	return da, db, nil
}

// L2NormBackward is the backward of L2Norm (y = scale·x·f, f = (Σx² + ε)^−½, ε = L2NormEps):
//
//	dx = scale·(f·dy − f³·x·(x·dy)),
//
// the exact Jacobian including ε. Unlike the form (dy − y(y·dy))/‖x‖, which assumes ε = 0, it
// stays finite and correct at tiny or zero norms (f ≤ ε^−½ = 1000). x and dy are [rows, n];
// it returns dx [rows, n]. Errors as L2Norm, plus len(dy) ≠ rows·n.
func L2NormBackward(x []float64, rows, n int, scale float64, dy []float64) ([]float64, error) {
	if err := l2NormCheck("L2NormBackward", x, rows, n, scale); err != nil {
		return nil, err
	}
	if err := checkLen("L2NormBackward", "dy", dy, rows*n, "rows·n"); err != nil {
		return nil, err
	}
	dx := make([]float64, len(x))
	for r := 0; r < rows; r++ {
		xr, dyr := x[r*n:(r+1)*n], dy[r*n:(r+1)*n]
		var ss, dot float64
		for i, v := range xr {
			ss += v * v
			dot += v * dyr[i]
		}
		f := 1 / math.Sqrt(ss+L2NormEps)
		c := f * f * f * dot
		for i, v := range xr {
			dx[r*n+i] = scale * (f*dyr[i] - c*v)
		}
	}
	return dx, nil
}

// GatedDeltaRuleBackward is the backward of GatedDeltaRule, in reverse time. Per window and
// value head, with S_{τ−1} the state before token τ, Ŝ = e^{g}·S_{τ−1}, w = v − Ŝᵀk,
// u = β·w, S_τ = Ŝ + k⊗u, o = S_τᵀq, and dS the gradient carried back into S_τ (zero after
// the last token):
//
//	dS += q⊗do;  dq = S_τ·do;  dk += dS·u;  du = dSᵀk;  dβ = du·w;  dv = β·du;
//	dŜ = dS − k⊗(β·du);  dk −= Ŝ·(β·du);  dg = Σ Ŝ⊙dŜ;  dS ← e^{g}·dŜ.
//
// States are checkpointed every 16 tokens in a forward sweep and recomputed inside each
// chunk during the backward (memory dk·dv·(t/16 + 16) per head). dq and dk are summed over
// the hv/hk value heads sharing a key head. Inputs are those of GatedDeltaRule plus do
// [nb·t, hv, dv]; it returns dq, dk [nb·t, hk, dk], dv [nb·t, hv, dv], dg and dbeta
// [nb·t, hv]. Errors as GatedDeltaRule, plus len(do) ≠ nb·t·hv·dv.
func GatedDeltaRuleBackward(q, k, v, g, beta, do []float64, nb, t, hk, hv, dk, dv int) (dq, dkey, dval, dg, dbeta []float64, err error) {
	const op = "GatedDeltaRuleBackward"
	if err := gatedDeltaRuleCheck(op, q, k, v, g, beta, nb, t, hk, hv, dk, dv); err != nil {
		return nil, nil, nil, nil, nil, err
	}
	rows := nb * t
	if err := checkLen(op, "do", do, rows*hv*dv, "nb·t·hv·dv"); err != nil {
		return nil, nil, nil, nil, nil, err
	}
	dq = make([]float64, len(q))
	dkey = make([]float64, len(k))
	dval = make([]float64, len(v))
	dg = make([]float64, rows*hv)
	dbeta = make([]float64, rows*hv)
	group := hv / hk
	nck := (t + deltaRuleChunk - 1) / deltaRuleChunk
	sz := dk * dv
	// One job per (window, key head): its value heads run one after the other, so the
	// accumulation into dq and dk never races.
	parallelFor(nb*hk, func(job int) {
		b, kh := job/hk, job%hk
		ckpt := make([]float64, nck*sz) // state before the first token of each chunk
		states := make([]float64, (deltaRuleChunk+1)*sz)
		us := make([]float64, deltaRuleChunk*dv) // u per token of the chunk
		ws := make([]float64, deltaRuleChunk*dv) // w = v − Ŝᵀk per token of the chunk
		dS := make([]float64, sz)
		du := make([]float64, dv)
		for j := kh * group; j < (kh+1)*group; j++ {
			// step advances S (in place) by token r, writing u and w.
			step := func(S []float64, r int, u, wv []float64) {
				decay := math.Exp(g[r*hv+j])
				bt := beta[r*hv+j]
				kt := k[(r*hk+kh)*dk:][:dk]
				copy(wv, v[(r*hv+j)*dv:][:dv])
				for a := 0; a < dk; a++ {
					row := S[a*dv:][:dv]
					for c := range row {
						row[c] *= decay
						wv[c] -= kt[a] * row[c]
					}
				}
				for c := range u {
					u[c] = bt * wv[c]
				}
				for a := 0; a < dk; a++ {
					row := S[a*dv:][:dv]
					for c := range row {
						row[c] += kt[a] * u[c]
					}
				}
			}
			S := make([]float64, sz)
			tmpU, tmpW := make([]float64, dv), make([]float64, dv)
			for ci := 0; ci < nck; ci++ {
				copy(ckpt[ci*sz:(ci+1)*sz], S)
				for tau := ci * deltaRuleChunk; tau < min(t, (ci+1)*deltaRuleChunk); tau++ {
					step(S, b*t+tau, tmpU, tmpW)
				}
			}
			clear(dS)
			for ci := nck - 1; ci >= 0; ci-- {
				t0, t1 := ci*deltaRuleChunk, min(t, (ci+1)*deltaRuleChunk)
				// states[i] is the state before token t0+i; states[t1−t0] after the last.
				copy(states[:sz], ckpt[ci*sz:(ci+1)*sz])
				for tau := t0; tau < t1; tau++ {
					i := tau - t0
					copy(states[(i+1)*sz:(i+2)*sz], states[i*sz:(i+1)*sz])
					step(states[(i+1)*sz:(i+2)*sz], b*t+tau, us[i*dv:(i+1)*dv], ws[i*dv:(i+1)*dv])
				}
				for tau := t1 - 1; tau >= t0; tau-- {
					i := tau - t0
					r := b*t + tau
					decay := math.Exp(g[r*hv+j])
					bt := beta[r*hv+j]
					kt := k[(r*hk+kh)*dk:][:dk]
					qt := q[(r*hk+kh)*dk:][:dk]
					dot := do[(r*hv+j)*dv:][:dv]
					dqt := dq[(r*hk+kh)*dk:][:dk]
					dkt := dkey[(r*hk+kh)*dk:][:dk]
					u, wv := us[i*dv:(i+1)*dv], ws[i*dv:(i+1)*dv]
					Sprev, Snow := states[i*sz:(i+1)*sz], states[(i+1)*sz:(i+2)*sz]
					// o = Sᵀq: dS += q⊗do, dq = S·do; S = Ŝ + k⊗u: dk += dS·u, du = dSᵀk.
					clear(du)
					for a := 0; a < dk; a++ {
						row, drow := Snow[a*dv:][:dv], dS[a*dv:][:dv]
						var sdo, dsu float64
						for c := range drow {
							sdo += row[c] * dot[c]
							drow[c] += qt[a] * dot[c]
							dsu += drow[c] * u[c]
							du[c] += kt[a] * drow[c]
						}
						dqt[a] += sdo
						dkt[a] += dsu
					}
					// u = β·w, w = v − Ŝᵀk.
					var db float64
					dvt := dval[(r*hv+j)*dv:][:dv]
					for c := range du {
						db += du[c] * wv[c]
						du[c] *= bt // now dw = −d(Ŝᵀk) = dv
						dvt[c] += du[c]
					}
					dbeta[r*hv+j] += db
					// dŜ = dS − k⊗dw, dk −= Ŝ·dw with Ŝ = e^g·S_prev; dg = Σ Ŝ⊙dŜ; dS ← e^g·dŜ.
					var dgs float64
					for a := 0; a < dk; a++ {
						prow, drow := Sprev[a*dv:][:dv], dS[a*dv:][:dv]
						var sw float64
						for c := range drow {
							sh := decay * prow[c]
							sw += sh * du[c]
							drow[c] -= kt[a] * du[c]
							dgs += sh * drow[c]
							drow[c] *= decay
						}
						dkt[a] -= sw
					}
					dg[r*hv+j] += dgs
				}
			}
		}
	})
	return dq, dkey, dval, dg, dbeta, nil
}

// GatedRMSNormBackward is the backward of GatedRMSNorm (y = w ⊙ n(x) ⊙ silu(z), n(x) =
// x·(mean(x²) + eps)^−½ per value head over dv): dz = dy ⊙ w ⊙ n(x) ⊙ silu′(z), and dx, dw
// are RMSNormBackward (plain gain) of dy ⊙ silu(z). x, z and dy are [rows, hv, dv], w is
// [dv]; it returns dx, dz [rows, hv, dv] and dw [dv]. Errors as GatedRMSNorm, plus
// len(dy) ≠ rows·hv·dv.
func GatedRMSNormBackward(x, z []float64, rows, hv, dv int, w []float64, eps float64, dy []float64) (dx, dz, dw []float64, err error) {
	if err := gatedRMSNormCheck("GatedRMSNormBackward", x, z, rows, hv, dv, w, eps); err != nil {
		return nil, nil, nil, err
	}
	if err := checkLen("GatedRMSNormBackward", "dy", dy, rows*hv*dv, "rows·hv·dv"); err != nil {
		return nil, nil, nil, err
	}
	y := rmsNorm(x, rows*hv, dv, w, eps, false) // w ⊙ n(x)
	dz = make([]float64, len(z))
	dn := make([]float64, len(z))
	for i := range z {
		dz[i] = dy[i] * y[i] * dsilu(z[i])
		dn[i] = dy[i] * silu(z[i])
	}
	dx, dw = rmsNormBackward(x, rows*hv, dv, w, eps, false, dn)
	return dx, dz, dw, nil
}

// SwiGLUBackward is the backward of SwiGLU (y = silu(gate) ⊙ up):
// dgate = dy ⊙ up ⊙ silu′(gate), dup = dy ⊙ silu(gate). All slices have one length.
// Errors: lengths differ.
func SwiGLUBackward(gate, up, dy []float64) (dgate, dup []float64, err error) {
	if len(gate) != len(up) || len(gate) != len(dy) {
		return nil, nil, fmt.Errorf("host.SwiGLUBackward: gate, up and dy have %d, %d and %d values, want one length", len(gate), len(up), len(dy))
	}
	dgate = make([]float64, len(gate))
	dup = make([]float64, len(gate))
	for i, x := range gate {
		dgate[i] = dy[i] * up[i] * dsilu(x)
		dup[i] = dy[i] * silu(x)
	}
	return dgate, dup, nil
}
