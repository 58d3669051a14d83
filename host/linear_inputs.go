package host

import (
	"fmt"
	"strings"
)

// LinearInputs runs the model on ids (nb windows of t tokens, as Forward) and calls f, layer
// by layer, once per distinct input of the decoder layers' projections with the checkpoint
// names of the weights that multiply it (arch.Tensor.Name, e.g.
// "model.layers.3.mlp.down_proj.weight") and the input x [nb·t, in] row-major (rows = nb·t,
// cols = in):
//
//   - the input RMSNorm (LayerActs.Norm1): q_proj, k_proj, v_proj (full attention) or
//     in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (GatedDeltaNet);
//   - o_proj: the gated attention output (AttentionActs.Gated); out_proj: the gated RMSNorm
//     output (DeltaNetActs.Normed);
//   - the post-attention RMSNorm (LayerActs.Norm2): gate_proj, up_proj;
//   - down_proj: the SwiGLU (LayerActs.Act).
//
// x belongs to the forward and must not be modified or kept after f returns. This is the
// host reference of what a teacher pass sees of each linear's input (the calibration
// statistics of compress.Calibration are reductions of it). The head is not reported.
// Errors: those of Forward on ids, or the first error f returns (wrapped, naming the
// weights).
func (n *Net) LinearInputs(ids [][]int, f func(names []string, x []float64, rows, cols int) error) error {
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
			names []string
			x     []float64
		}
		var in []input
		if s := T.SelfAttn; s != nil {
			in = append(in, input{[]string{s.QProj.Name, s.KProj.Name, s.VProj.Name}, a.Norm1}, input{[]string{s.OProj.Name}, a.Attn.Gated})
		} else {
			d := T.LinearAttn
			in = append(in, input{[]string{d.InProjQKV.Name, d.InProjZ.Name, d.InProjB.Name, d.InProjA.Name}, a.Norm1},
				input{[]string{d.OutProj.Name}, a.Delta.Normed})
		}
		in = append(in, input{[]string{T.MLP.GateProj.Name, T.MLP.UpProj.Name}, a.Norm2}, input{[]string{T.MLP.DownProj.Name}, a.Act})
		for _, p := range in {
			if err := f(p.names, p.x, rows, len(p.x)/rows); err != nil {
				return fmt.Errorf("host.Net.LinearInputs: %s: %w", strings.Join(p.names, ", "), err)
			}
		}
		x = a.Out
	}
	return nil
}
