package gpu

import (
	"fmt"
	"math"
)

const hiddenLossWG = 128

// HiddenLossEps is the ε of HiddenLoss's denominators: ‖t‖² + ε (normalised MSE) and
// √(‖s‖² + ε), √(‖t‖² + ε) (cosine), so that a zero row gives a finite loss
// (host.HiddenLossEps is the same value).
const HiddenLossEps = 1e-6

// HiddenLossKind selects the per-token measure of HiddenLoss.
type HiddenLossKind int

const (
	// HiddenMSE is the normalised squared error e = ‖s − t‖² / (‖t‖² + ε).
	HiddenMSE HiddenLossKind = iota
	// HiddenCosine is the cosine distance e = 1 − ⟨s, t⟩ / (√(‖s‖² + ε)·√(‖t‖² + ε)).
	HiddenCosine
)

// String is "mse" or "cosine" (or "HiddenLossKind(k)").
func (k HiddenLossKind) String() string {
	switch k {
	case HiddenMSE:
		return "mse"
	case HiddenCosine:
		return "cosine"
	}
	return fmt.Sprintf("HiddenLossKind(%d)", int(k))
}

// HiddenLossDims are the sizes of HiddenLoss.
type HiddenLossDims struct {
	// Rows is the number of token rows, Hidden the values per row (hidden_size).
	Rows, Hidden int
	// Offset is the first element of loss written: loss[Offset + r] for row r (so the
	// per-layer losses of a step can share one buffer).
	Offset int
}

// HiddenLoss records the hidden-state loss of one layer's output (DESIGN.md §6 "Hidden-state
// loss"; host.HiddenLoss is its reference): per token row r of the student's hidden state
// hs [Rows, Hidden] (F32) and the teacher's ht (F32, or F16 as the teacher cache holds it),
// e_r of kind (HiddenMSE: ‖s − t‖²/(‖t‖² + ε); HiddenCosine: 1 − cos(s, t), ε = HiddenLossEps)
// is written to loss[d.Offset + r] (F32, at least Offset + Rows elements), and, when dh is not
// nil, dh[r, :] += scale·∂e_r/∂s (F32 [Rows, Hidden], accumulated: dh may be the residual
// gradient of the backward, and scale carries the weight and the mean's 1/count). One
// workgroup per row, f32 sums. Errors: a nil recorder, non-positive sizes, a negative offset,
// an unknown kind, scale not finite, buffer dtypes or sizes that disagree, aliasing.
func HiddenLoss(r *Recorder, hs, ht, dh, loss *Buffer, d HiddenLossDims, kind HiddenLossKind, scale float64) error {
	if err := r.usable(); err != nil {
		return err
	}
	const op = "HiddenLoss"
	rows, n := d.Rows, d.Hidden
	if err := positive(op, "Rows, Hidden", rows, n); err != nil {
		return err
	}
	if float64(rows)*float64(n) > maxU32Elems || d.Offset < 0 || float64(d.Offset)+float64(rows) > maxU32Elems {
		return fmt.Errorf("gpu: %s: Rows·Hidden = %d·%d or Offset %d outside the 2³¹ index range", op, rows, n, d.Offset)
	}
	if kind != HiddenMSE && kind != HiddenCosine {
		return fmt.Errorf("gpu: %s: unknown kind %v", op, kind)
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) {
		return fmt.Errorf("gpu: %s: scale = %g is not finite", op, scale)
	}
	if err := need(op, "hs", hs, rows*n, F32); err != nil {
		return err
	}
	if err := need(op, "ht", ht, rows*n, F32, F16); err != nil {
		return err
	}
	if err := need(op, "loss", loss, -1, F32); err != nil {
		return err
	}
	if loss.numel < d.Offset+rows {
		return fmt.Errorf("gpu: %s: loss %v has %d elements, want at least Offset + Rows = %d", op, loss, loss.numel, d.Offset+rows)
	}
	bufs := map[string]*Buffer{"hs": hs, "ht": ht, "loss": loss}
	binds := []Binding{Whole(hs), Whole(ht)}
	access := []Access{Read, Read}
	if dh != nil {
		if err := need(op, "dh", dh, rows*n, F32); err != nil {
			return err
		}
		bufs["dh"] = dh
		binds, access = append(binds, Whole(dh)), append(access, ReadWrite)
	}
	if err := distinct(op, bufs); err != nil {
		return err
	}
	binds, access = append(binds, Whole(loss)), append(access, ReadWrite)
	if err := r.dispatch1D(KernelSpec{
		Name: op, File: "hidden_loss.wgsl",
		Params: struct {
			rowForm
			Cosine, F16, Grad bool
		}{r.d.rowFormOne(hiddenLossWG), kind == HiddenCosine, ht.dtype == F16, dh != nil},
		Bindings: access, Uniforms: 5,
	}, rows, []uint32{uint32(rows), uint32(n), uint32(d.Offset), math.Float32bits(HiddenLossEps), math.Float32bits(float32(scale))}, binds...); err != nil {
		return err
	}
	bytes := float64(rows) * float64(n) * float64(4+ht.dtype.Size())
	if dh != nil {
		bytes *= 2 // hs and ht read again, dh read and written
		bytes += 8 * float64(rows) * float64(n)
	}
	r.Cost(0, bytes+4*float64(rows))
	return nil
}
