// Package gradcheck checks a Student's GPU gradient against the float64 host reference and
// against central finite differences, at chosen coordinates of its trained vectors, on the
// live values of the net (notebook 02's check, issue 14). It is its own package because it
// imports package host, which production nvgkit must not (issue 13); importing it registers
// Check as train.Lab's GradCheck (train.RegisterGradChecker).
//
// The four gradients of a coordinate θ of a batch's loss ℓ = mean_t KL(teacher top-k ‖
// student):
//
//	GPU      ∂ℓ/∂θ from nvgkit.Step on the device's GEMM path (f32, or tensor cores)
//	Host     ∂ℓ/∂θ from host.Net.StudentLossGrad (float64), the same model and top-k
//	FDHost   (ℓ(θ+h) − ℓ(θ−h)) / (θ₊ − θ₋) with host.Net.StudentLoss, h = StepHost·|θ|
//	FDGPU    the same with nvgkit.LossOnly (f32 loss) on the f32 path, h = StepGPU·|θ|
//
// (h absolute, StepHost or StepGPU, for a norm gain; θ₊ − θ₋ is the step actually taken
// after rounding to the vector's precision). The GPU finite difference needs a large step
// because the f32 loss is rounded to ~1e-7; its curvature error is ~1e-3.
//
// Tensor cores. Where the device's GEMMs run on cooperative matrices
// (gpu.Device.TensorCores().On: f16 operands, f32 accumulation), GPU is their gradient and
// is checked against Host with GradCheckSpec.TolGPUHostCoopmat, a tolerance derived from
// f16's rounding. Finite differences belong to the f32 path: on f16-rounded activations the
// loss moves in steps comparable to a 3 % step's change, so FDGPU runs with the WGSL kernels
// (gpu.SetTensorCores(false), process-wide for the duration of the check) and is compared
// with the f32 path's own analytic gradient, GPUF32, computed again with them (DESIGN.md §8).
package gradcheck

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() { train.RegisterGradChecker(Check) }

// Check computes the table of in (see the package documentation): for each name of
// in.Spec.Names (resolved: every field set), the in.Spec.Coords elements of largest |GPU
// gradient| (ties: the lower index). It changes the net's values and gradients (the Lab
// restores them). Errors: a name the net or the host net does not have; Coords larger than a
// vector; host or GPU errors; in.Context's error when it is cancelled between coordinates.
func Check(in train.GradCheckInput) (session.GradCheckResult, error) {
	sp := in.Spec
	net := in.Student
	if net == nil || in.Model == nil || in.Top == nil || len(in.IDs) == 0 {
		return session.GradCheckResult{}, errors.New("gradcheck.Check: nil net, model or top-k, or no windows")
	}
	W, T, K := len(in.IDs), len(in.IDs[0]), in.Top.K
	tc := net.Device().TensorCores()
	res := session.GradCheckResult{Step: in.Step, Windows: W, T: T, K: K, Spec: sp, TensorCores: tc.String()}
	// Progress units: the GPU gradient, a GPU finite difference per row, the host's load and
	// gradient, a host finite difference per row (the gradients take seconds on a CPU
	// adapter: they are units of their own, and a report at 0 says the check began).
	total := 2*len(sp.Names)*sp.Coords + 2
	report := func(done int) {
		if in.Progress != nil {
			in.Progress(done, total)
		}
	}
	report(0)

	// GPU: the analytic gradient from zeroed gradients on the device's path (forced to it, so
	// that GPU is what TensorCores says), and on tensor cores again on the f32 path, then
	// finite differences of LossOnly on the f32 path on the snapshot's copy of the values.
	work, err := nvgkit.NewWork(net.Device(), net, W, T)
	if err != nil {
		return res, err
	}
	defer work.Release()
	grads, loss, err := analytic(net, work, in, tc.On)
	if err != nil {
		return res, err
	}
	res.LossGPU = loss
	report(1)
	grads32 := grads
	if tc.On {
		if grads32, _, err = analytic(net, work, in, false); err != nil {
			return res, err
		}
	}
	defer gpu.SetTensorCores(false)() // the finite differences: the f32 path
	snap, err := nvgkit.Snapshot(net)
	if err != nil {
		return res, err
	}
	for _, name := range sp.Names {
		g, p := grads[name], snap.Param(name)
		if g == nil || p == nil {
			return res, fmt.Errorf("gradcheck.Check: the student has no trained vector %q", name)
		}
		if sp.Coords > len(g) {
			return res, fmt.Errorf("gradcheck.Check: Coords = %d but %s has %d values", sp.Coords, name, len(g))
		}
		for _, i := range largest(g, sp.Coords) {
			res.Rows = append(res.Rows, session.GradCheckRow{Name: name, Index: i, Value: float64(p[i]), GPU: float64(g[i]), GPUF32: float64(grads32[name][i])})
		}
	}
	gpuLoss := func() (float64, error) {
		if err := nvgkit.Restore(net, snap); err != nil {
			return 0, err
		}
		l, _, err := nvgkit.LossOnly(net, work, in.IDs, in.Top)
		return l, err
	}
	for k := range res.Rows {
		if in.Context != nil && in.Context.Err() != nil {
			return res, in.Context.Err()
		}
		r := &res.Rows[k]
		p := snap.Param(r.Name)
		v0 := p[r.Index]
		h := stepOf(r.Name, float64(v0), sp.StepGPU)
		p[r.Index] = float32(float64(v0) + h)
		vp := p[r.Index]
		lp, err := gpuLoss()
		if err == nil {
			p[r.Index] = float32(float64(v0) - h)
			vm := p[r.Index]
			var lm float64
			if lm, err = gpuLoss(); err == nil {
				r.FDGPU = (lp - lm) / float64(vp-vm)
			}
		}
		p[r.Index] = v0
		if err != nil {
			return res, fmt.Errorf("gradcheck.Check: GPU finite difference of %s[%d]: %w", r.Name, r.Index, err)
		}
		report(2 + k)
	}
	if err := nvgkit.Restore(net, snap); err != nil { // the unperturbed values back
		return res, err
	}

	// Host: the float64 reference of the same student, with the live values.
	hn, err := host.Load(in.Model)
	if err != nil {
		return res, fmt.Errorf("gradcheck.Check: host: %w", err)
	}
	for _, name := range snap.Names() {
		v, err := hostVector(hn, name)
		if err != nil {
			return res, err
		}
		if err := v.assign(snap.Param(name)); err != nil {
			return res, fmt.Errorf("gradcheck.Check: host %s: %w", name, err)
		}
	}
	tid := make([]int, len(in.Top.IDs))
	tp := make([]float64, len(in.Top.Probs))
	for i := range tid {
		tid[i], tp[i] = int(in.Top.IDs[i]), float64(in.Top.Probs[i])
	}
	sg, err := hn.StudentLossGrad(in.IDs, tid, tp, K)
	if err != nil {
		return res, fmt.Errorf("gradcheck.Check: host: %w", err)
	}
	res.LossHost = sg.Loss
	report(len(res.Rows) + 2)
	for k := range res.Rows {
		if in.Context != nil && in.Context.Err() != nil {
			return res, in.Context.Err()
		}
		r := &res.Rows[k]
		hg := sg.Grads[r.Name]
		if r.Index >= len(hg) {
			return res, fmt.Errorf("gradcheck.Check: the host reference has no gradient for %s[%d]", r.Name, r.Index)
		}
		r.Host = hg[r.Index]
		v, err := hostVector(hn, r.Name)
		if err != nil {
			return res, err
		}
		v0 := v.get(r.Index)
		h := stepOf(r.Name, v0, sp.StepHost)
		vp := v.set(r.Index, v0+h)
		lp, _, err := hn.StudentLoss(in.IDs, tid, tp, K)
		if err == nil {
			vm := v.set(r.Index, v0-h)
			var lm float64
			if lm, _, err = hn.StudentLoss(in.IDs, tid, tp, K); err == nil {
				r.FDHost = (lp - lm) / (vp - vm)
			}
		}
		v.set(r.Index, v0)
		if err != nil {
			return res, fmt.Errorf("gradcheck.Check: host finite difference of %s[%d]: %w", r.Name, r.Index, err)
		}
		r.ErrGPUHost, r.ErrFDHost, r.ErrFDGPU = session.RelErr(r.GPU, r.Host), session.RelErr(r.FDHost, r.Host), session.RelErr(r.FDGPU, r.GPUF32)
		for c, e := range [3]float64{r.ErrGPUHost, r.ErrFDHost, r.ErrFDGPU} {
			if !(e <= res.Worst[c]) { // NaN too
				res.Worst[c] = e
			}
		}
		report(len(res.Rows) + 3 + k)
	}
	return res, nil
}

// analytic returns the student's analytic gradients (and the loss) of in's batch from zeroed
// gradients, with the cooperative-matrix GEMMs (coopmat) or the WGSL kernels forced for the
// step.
func analytic(net *nvgkit.Net, work *nvgkit.Work, in train.GradCheckInput, coopmat bool) (map[string][]float32, float64, error) {
	defer gpu.SetTensorCores(coopmat)()
	if err := nvgkit.ZeroGrads(net); err != nil {
		return nil, 0, err
	}
	st, err := nvgkit.Step(net, work, in.IDs, in.Top)
	if err != nil {
		return nil, 0, err
	}
	g, err := nvgkit.Grads(net)
	return g, st.Loss, err
}

// largest returns the indices of the n elements of g of largest |g| (ties: the lower index),
// in that order.
func largest(g []float32, n int) []int {
	idx := make([]int, len(g))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return math.Abs(float64(g[idx[a]])) > math.Abs(float64(g[idx[b]])) })
	return idx[:n]
}

// isMetric reports whether name is a BLR metric scale ("….p<i>.<h|l|g>"), not a gain.
func isMetric(name string) bool { return strings.Contains(name, ".weight.p") }

// stepOf is the finite-difference step of a coordinate of value v: rel·|v| for a metric
// scale, rel for a gain (notebook 02).
func stepOf(name string, v, rel float64) float64 {
	if isMetric(name) {
		return rel * math.Abs(v)
	}
	return rel
}

// hostVec is one trained vector of a host net: BLR scales (f32) or a gain (float64).
type hostVec struct {
	f32 []float32
	f64 []float64
}

func (v hostVec) get(i int) float64 {
	if v.f32 != nil {
		return float64(v.f32[i])
	}
	return v.f64[i]
}

// set stores x at i and returns the value stored (rounded to f32 for a BLR scale).
func (v hostVec) set(i int, x float64) float64 {
	if v.f32 != nil {
		v.f32[i] = float32(x)
		return float64(v.f32[i])
	}
	v.f64[i] = x
	return x
}

// assign copies the GPU's values into v. Errors: another length.
func (v hostVec) assign(src []float32) error {
	n := len(v.f32) + len(v.f64)
	if len(src) != n {
		return fmt.Errorf("%d values on the GPU, %d on the host", len(src), n)
	}
	if v.f32 != nil {
		copy(v.f32, src)
		return nil
	}
	for i, x := range src {
		v.f64[i] = float64(x)
	}
	return nil
}

// hostVector finds the named trained vector in hn: a BLR scale in the cmf.BLRWeight of its
// projection, a gain in its float64 slice.
func hostVector(hn *host.Net, name string) (hostVec, error) {
	bad := func() (hostVec, error) {
		return hostVec{}, fmt.Errorf("gradcheck: the host net has no trained vector %q", name)
	}
	if name == "model.norm.weight" {
		return hostVec{f64: hn.FinalNorm}, nil
	}
	f := strings.Split(name, ".")
	if len(f) < 5 || f[0] != "model" || f[1] != "layers" {
		return bad()
	}
	l, err := strconv.Atoi(f[2])
	if err != nil || l < 0 || l >= len(hn.Layers) {
		return bad()
	}
	L := hn.Layers[l]
	if len(f) == 8 { // model.layers.L.<module>.<proj>.weight.p<i>.<h|l|g>
		lin := map[string]host.Linear{"gate_proj": L.GateProj, "up_proj": L.UpProj, "down_proj": L.DownProj}
		if L.Delta != nil {
			lin["in_proj_qkv"], lin["in_proj_z"], lin["out_proj"] = L.Delta.InProjQKV, L.Delta.InProjZ, L.Delta.OutProj
		}
		if L.Attn != nil {
			lin["q_proj"], lin["k_proj"], lin["v_proj"], lin["o_proj"] = L.Attn.QProj, L.Attn.KProj, L.Attn.VProj, L.Attn.OProj
		}
		b, ok := lin[f[4]].(*host.BLRLinear)
		p, perr := strconv.Atoi(strings.TrimPrefix(f[6], "p"))
		if !ok || perr != nil || !strings.HasPrefix(f[6], "p") || p < 0 || p >= len(b.W.Paths) {
			return bad()
		}
		path := &b.W.Paths[p]
		switch f[7] {
		case "h":
			return hostVec{f32: path.H}, nil
		case "l":
			return hostVec{f32: path.L}, nil
		case "g":
			return hostVec{f32: path.G}, nil
		}
		return bad()
	}
	var v []float64
	switch strings.Join(f[3:len(f)-1], ".") {
	case "input_layernorm":
		v = L.InputNorm
	case "post_attention_layernorm":
		v = L.PostNorm
	case "linear_attn.norm":
		if L.Delta != nil {
			v = L.Delta.Norm
		}
	case "self_attn.q_norm":
		if L.Attn != nil {
			v = L.Attn.QNorm
		}
	case "self_attn.k_norm":
		if L.Attn != nil {
			v = L.Attn.KNorm
		}
	}
	if v == nil || f[len(f)-1] != "weight" {
		return bad()
	}
	return hostVec{f64: v}, nil
}
