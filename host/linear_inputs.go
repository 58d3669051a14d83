package host

import "fmt"

// LinearInputs runs the model on ids (nb windows of t tokens, as Forward) and calls f once per
// projection of every decoder layer, in layer order, with the checkpoint name of the
// projection's weight (arch.Tensor.Name, e.g. "model.layers.3.mlp.down_proj.weight") and the
// input x [nb·t, in] row-major that the projection multiplies (rows = nb·t, cols = in):
//
//   - q_proj, k_proj, v_proj (full attention) and in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
//     (GatedDeltaNet): the input RMSNorm of the layer (LayerActs.Norm1), one slice shared by all
//     of them;
//   - o_proj: the gated attention output (AttentionActs.Gated); out_proj: the gated RMSNorm
//     output (DeltaNetActs.Normed);
//   - gate_proj, up_proj: the post-attention RMSNorm (LayerActs.Norm2), shared; down_proj: the
//     SwiGLU (LayerActs.Act).
//
// x belongs to the forward and must not be modified or kept after f returns. This is the
// host reference of what a teacher pass sees of each linear's input (the calibration
// statistics of compress.Calibration are reductions of it). The head is not reported.
// Errors: those of Forward on ids, or the first error f returns (wrapped, naming the tensor).
func (n *Net) LinearInputs(ids [][]int, f func(name string, x []float64, rows, cols int) error) error {
	flat, t, err := n.checkIDs(ids, "LinearInputs")
	if err != nil {
		return err
	}
	c := n.Config
	nb := len(ids)
	rows := nb * t
	x, err := Embedding(n.Embed, c.VocabSize, c.HiddenSize, flat)
	if err != nil {
		return err
	}
	layout := c.Layout()
	for l := range n.Layers {
		a, err := n.layer(l, x, nb, t)
		if err != nil {
			return err
		}
		T := layout.Layers[l]
		type input struct {
			name string
			x    []float64
		}
		var in []input
		if s := T.SelfAttn; s != nil {
			in = append(in, input{s.QProj.Name, a.Norm1}, input{s.KProj.Name, a.Norm1}, input{s.VProj.Name, a.Norm1},
				input{s.OProj.Name, a.Attn.Gated})
		} else {
			d := T.LinearAttn
			in = append(in, input{d.InProjQKV.Name, a.Norm1}, input{d.InProjZ.Name, a.Norm1}, input{d.InProjB.Name, a.Norm1},
				input{d.InProjA.Name, a.Norm1}, input{d.OutProj.Name, a.Delta.Normed})
		}
		in = append(in, input{T.MLP.GateProj.Name, a.Norm2}, input{T.MLP.UpProj.Name, a.Norm2}, input{T.MLP.DownProj.Name, a.Act})
		for _, p := range in {
			if err := f(p.name, p.x, rows, len(p.x)/rows); err != nil {
				return fmt.Errorf("host.Net.LinearInputs: %s: %w", p.name, err)
			}
		}
		x = a.Out
	}
	return nil
}
