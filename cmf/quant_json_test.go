package cmf

import (
	"encoding/json"
	"testing"
)

// TestQuantSummaryJSON: the JSON of a q8 summary has every field under its snake_case key, in
// sorted order, and the bits per weight (8·(1024+16)/1024 = 8.125).
func TestQuantSummaryJSON(t *testing.T) {
	s := QuantSummary{Scheme: QuantQ8, CodeDType: I8, Block: [2]int{1, 128}, ScaleDType: F16, Tensors: 2, Params: 1024, CodeBytes: 1024, ScaleBytes: 16}
	b, err := json.Marshal([]QuantSummary{s})
	if err != nil {
		t.Fatal(err)
	}
	const want = `[{"bits_per_weight":8.125,"block":[1,128],"code_bytes":1024,"code_dtype":"I8","params":1024,"scale_bytes":16,"scale_dtype":"F16","scheme":"q8","tensors":2}]`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}
