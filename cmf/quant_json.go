package cmf

import "encoding/json"

// MarshalJSON writes s as `nvg info --json`'s "quantization" entries: an object with the
// keys scheme, code_dtype, block, scale_dtype, tensors, params, code_bytes, scale_bytes and
// bits_per_weight (BitsPerWeight), in sorted key order.
func (s QuantSummary) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"scheme": s.Scheme, "code_dtype": s.CodeDType, "block": s.Block, "scale_dtype": s.ScaleDType,
		"tensors": s.Tensors, "params": s.Params, "code_bytes": s.CodeBytes, "scale_bytes": s.ScaleBytes, "bits_per_weight": s.BitsPerWeight()})
}
