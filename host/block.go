package host

import "fmt"

// BlockLoss is the objective of the block-wise reconstruction of decoder layer l (DESIGN.md
// §6 "Block-wise reconstruction"; NanoQuant, arXiv 2602.06694, block reconstruction on the
// compressed model's own inputs), the reference of nvgkit.BlockStep and nvgkit.BlockLoss:
// the student's forward over ids (nb windows of t tokens) through layers 0…l, so that layer
// l reads the output of the student's own layers 0…l−1, then the mean over the nb·t tokens
// of HiddenLoss (the normalised MSE ‖s − t‖²/(‖t‖² + ε)) of layer l's output s against
// target [nb·t, H] (row r = window·t + position), the teacher's output of layer l on the
// same windows. It returns that mean and the per-token errors [nb·t]. Errors: Forward's for
// ids, l outside [0, num_hidden_layers), a target of another length.
func (n *Net) BlockLoss(ids [][]int, l int, target []float64) (loss float64, perToken []float64, err error) {
	bg, err := n.block("BlockLoss", ids, l, target, false)
	if err != nil {
		return 0, nil, err
	}
	return bg.Loss, bg.PerToken, nil
}

// BlockGrads is the result of Net.BlockLossGrad.
type BlockGrads struct {
	// Loss is the block objective (BlockLoss), PerToken its per-token errors [nb·t].
	Loss     float64
	PerToken []float64
	// Grads holds d Loss / d θ of decoder layer l's trainables only — its RMSNorm gains and
	// the h, ℓ, g of every path of its BLR linears, keyed as StudentGrads.Grads — from the
	// backward of layer l alone (the other layers' values do not enter the objective but
	// through layer l's input, which the block-wise reconstruction holds fixed).
	Grads map[string][]float64
}

// Names returns the keys of g.Grads in sorted order.
func (g *BlockGrads) Names() []string { return (&StudentGrads{Grads: g.Grads}).Names() }

// BlockLossGrad is BlockLoss with the gradient of layer l's trainables: layer l's
// LayerBackward with dOut = (1/(nb·t))·∂e/∂s, the per-token normalised MSE's gradient
// averaged over the tokens. Errors: BlockLoss's and LayerBackward's.
func (n *Net) BlockLossGrad(ids [][]int, l int, target []float64) (*BlockGrads, error) {
	return n.block("BlockLossGrad", ids, l, target, true)
}

// block runs the block objective of layer l, with the gradient when grad.
func (n *Net) block(op string, ids [][]int, l int, target []float64, grad bool) (*BlockGrads, error) {
	flat, t, err := n.checkIDs(ids, op)
	if err != nil {
		return nil, err
	}
	if l < 0 || l >= len(n.Layers) {
		return nil, fmt.Errorf("host.Net.%s: layer %d is outside [0, %d)", op, l, len(n.Layers))
	}
	c := n.Config
	nb := len(ids)
	rows, H := nb*t, c.HiddenSize
	if len(target) != rows*H {
		return nil, fmt.Errorf("host.Net.%s: the target of layer %d has %d values, want nb·t·H = %d", op, l, len(target), rows*H)
	}
	x, err := Embedding(n.Embed, c.VocabSize, H, flat)
	if err != nil {
		return nil, err
	}
	var a *LayerActs
	for j := 0; j <= l; j++ {
		if a, err = n.layer(j, x, nb, t); err != nil {
			return nil, err
		}
		x = a.Out
	}
	e, de, err := HiddenLoss(x, target, rows, H, false)
	if err != nil {
		return nil, err
	}
	bg := &BlockGrads{PerToken: e}
	for _, v := range e {
		bg.Loss += v
	}
	bg.Loss /= float64(rows)
	if !grad {
		return bg, nil
	}
	for i := range de {
		de[i] /= float64(rows)
	}
	bg.Grads = map[string][]float64{}
	if _, err := n.LayerBackward(a, de, bg.Grads); err != nil {
		return nil, err
	}
	return bg, nil
}
