package compress

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestNewModelReport: the options' target, paths, init and seed, the overall bits per weight
// (weight-count weighted: (1·64·64 + 2·64·128)/(64·64 + 64·128) = 5/3) and the per-kind
// summary, under the JSON keys nvg compress --json writes.
func TestNewModelReport(t *testing.T) {
	reports := []TensorReport{
		{Name: "model.layers.0.mlp.up_proj.weight", Kind: "up_proj", Shape: []int{64, 64}, Rank: 8, Paths: 1, BitsPerWeight: 1},
		{Name: "model.layers.1.mlp.up_proj.weight", Kind: "up_proj", Shape: []int{64, 128}, Rank: 8, Paths: 2, BitsPerWeight: 2},
	}
	r := NewModelReport(reports, Options{BitsPerWeight: 1.5, Paths: Paths2, Seed: 7, Init: InitRefine})
	if r.TargetBPW != 1.5 || r.Paths != "2" || r.Init != "refine" || r.Seed != 7 || len(r.Tensors) != 2 || len(r.Kinds) != 1 ||
		r.Kinds[0].Kind != "up_proj" || r.OverallBPW < 5.0/3-1e-12 || r.OverallBPW > 5.0/3+1e-12 {
		t.Fatalf("%+v", r)
	}
	r.Teacher, r.Output, r.Products = "T", "S.cmf", "cpu-f64"
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"teacher":"T"`, `"output":"S.cmf"`, `"target_bits_per_weight":1.5`, `"paths":"2"`, `"init":"refine"`, `"seed":7`, `"products":"cpu-f64"`, `"kinds":[`, `"tensors":[`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON %s lacks %s", b, key)
		}
	}
	if strings.Contains(string(b), `"device"`) {
		t.Errorf("JSON %s has a device without one", b)
	}
}
