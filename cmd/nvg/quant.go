package main

import (
	"fmt"

	"github.com/nvg-project/nvg/cmf"
)

// printQuantization prints one line per kind of 8-bit weight of m (cmf.Model.Quantization:
// scheme, block, scale dtype): tensors, parameters, code and scale bytes, bits per weight.
// It prints nothing for a model without 8-bit weights.
func printQuantization(m *cmf.Model) {
	for _, q := range m.Quantization() {
		what := fmt.Sprintf("%d×%d block", q.Block[0], q.Block[1])
		if q.Block[0] == 1 {
			what = fmt.Sprintf("row and %d inputs", q.Block[1])
		}
		fmt.Printf("8-bit weights  %s (%s codes, %s scales per %s): %d tensors, %d parameters, %s codes + %s scales, %.4g bits/weight\n",
			q.Scheme, q.CodeDType, q.ScaleDType, what, q.Tensors, q.Params, humanBytes(q.CodeBytes), humanBytes(q.ScaleBytes), q.BitsPerWeight())
	}
}
