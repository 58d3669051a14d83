package nvgkit

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/nvg-project/nvg/cmf"
	"github.com/x448/float16"
)

// RoundMetricF16 rounds every BLR metric scale (h, ℓ, g of every path) of a Student to the
// nearest float16 (round to nearest even) in place on the GPU — exactly what Export writes
// into the BLR payloads, whose scales are f16 (DESIGN.md §4). Adam keeps the scales in f32
// (an f16 master copy would swallow relative steps below half an f16 ulp, 2⁻¹²); call this
// before measuring the loss the exported model will have (LossOnly afterwards equals LossOnly
// of the exported, re-loaded model). Gains are exported as f32 and are not rounded. Every
// value is checked before anything is written. Errors: a nil, released or Teacher net; a scale
// beyond the f16 range (|x| > 65504, named); a GPU error.
func RoundMetricF16(net *Net) error {
	const op = "RoundMetricF16"
	if err := net.requireStudent(op); err != nil {
		return err
	}
	rounded := map[*trainable][]float32{}
	for _, t := range net.st.trainables {
		if !t.metric {
			continue
		}
		v, err := net.dev.ReadFloat32(t.param)
		if err != nil {
			return fmt.Errorf("nvgkit.%s: %s: %w", op, t.name, err)
		}
		for i, x := range v {
			h := float16.Fromfloat32(x)
			if h.IsInf(0) || h.IsNaN() {
				return fmt.Errorf("nvgkit.%s: %s[%d] = %g is not finite in f16 (|x| ≤ 65504)", op, t.name, i, x)
			}
			v[i] = h.Float32()
		}
		rounded[t] = v
	}
	for _, t := range net.st.trainables {
		if v, ok := rounded[t]; ok {
			if err := net.dev.WriteFloat32(t.param, v); err != nil {
				return fmt.Errorf("nvgkit.%s: %s: %w", op, t.name, err)
			}
		}
	}
	return nil
}

// Export returns a model of model's layout with a Student's trained values: every BLR
// projection re-encoded (cmf.EncodeBLR) with the GPU's h, ℓ, g of every path rounded to f16
// (round to nearest even; the sign bits, rank, paths and shape unchanged), every RMSNorm gain
// replaced by an F32 tensor of the GPU's f32 values (exact), and every other tensor shared
// with model (which must stay open until the result is written, e.g. by cmf.WriteCMF). model
// is the one the net was loaded from (or one of the same layout). The export's loss is that of
// the net after RoundMetricF16.
// Errors (nothing is modified): a nil model; a nil, released or Teacher net; an architecture
// that differs from the net's; a tensor of model that is BLR where the net holds it dense or
// the reverse, or whose m, n, rank or number of paths differ (named); a trained scale beyond
// the f16 range (named); a readback error.
func Export(net *Net, model *cmf.Model) (*cmf.Model, error) {
	const op = "Export"
	if err := net.requireStudent(op); err != nil {
		return nil, err
	}
	if model == nil {
		return nil, errors.New("nvgkit.Export: nil model")
	}
	if !bytes.Equal(model.Config.JSON(), net.Config.JSON()) {
		return nil, fmt.Errorf("nvgkit.%s: the model's architecture differs from the net's", op)
	}
	out := cmf.NewModel(model.Config)
	blrNames := map[string]bool{}
	for _, l := range net.st.blrs {
		blrNames[l.name] = true
	}
	for _, name := range model.Names() {
		tn := model.Tensors[name]
		if tn.DType == cmf.BLR && !blrNames[name] {
			return nil, fmt.Errorf("nvgkit.%s: tensor %s is BLR in the model but dense in the net (loaded from another model?)", op, name)
		}
		if err := out.Set(tn); err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
		}
	}
	for _, l := range net.st.blrs {
		tn, err := model.Tensor(l.name)
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
		}
		if tn.DType != cmf.BLR {
			return nil, fmt.Errorf("nvgkit.%s: tensor %s is %s in the model but BLR in the net (loaded from another model?)", op, l.name, tn.DType)
		}
		w, err := cmf.BLRFromTensor(tn)
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
		}
		if w.M != l.blr.M || w.N != l.blr.N || w.Rank != l.blr.Rank || len(w.Paths) != len(l.blr.Paths) {
			return nil, fmt.Errorf("nvgkit.%s: tensor %s: the model's BLR is %d×%d rank %d with %d paths, the net's %d×%d rank %d with %d",
				op, l.name, w.M, w.N, w.Rank, len(w.Paths), l.blr.M, l.blr.N, l.blr.Rank, len(l.blr.Paths))
		}
		sc, err := l.blr.ReadScales()
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %s: %w", op, l.name, err)
		}
		for p := range w.Paths {
			w.Paths[p].H, w.Paths[p].G, w.Paths[p].L = sc[p].H, sc[p].G, sc[p].L
		}
		if err := l.readSigns(net.dev, w); err != nil { // the signs as trained (SignStep, WriteSigns)
			return nil, fmt.Errorf("nvgkit.%s: %s: %w", op, l.name, err)
		}
		payload, err := cmf.EncodeBLR(w)
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: tensor %s: %w", op, l.name, err)
		}
		nt, err := cmf.NewTensor(l.name, cmf.BLR, []int{w.M, w.N}, payload)
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
		}
		if err := out.Set(nt); err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
		}
	}
	for _, t := range net.st.trainables {
		if t.metric {
			continue
		}
		v, err := net.dev.ReadFloat32(t.param)
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %s: %w", op, t.name, err)
		}
		f := make([]float64, len(v))
		for i, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("nvgkit.%s: gain %s[%d] = %g is not finite", op, t.name, i, x)
			}
			f[i] = float64(x)
		}
		nt, err := cmf.NewFloatTensor(t.name, cmf.F32, t.shape, f)
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
		}
		if err := out.Set(nt); err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
		}
	}
	return out, nil
}
