package compress

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
)

func TestSummarizeByKindByHand(t *testing.T) {
	reps := []TensorReport{
		{Name: "a", Kind: "up_proj", Shape: []int{8, 8}, Paths: 1, BitsPerWeight: 1, RelErr: 0.5},
		{Name: "b", Kind: "up_proj", Shape: []int{8, 24}, Paths: 2, BitsPerWeight: 2, RelErr: 0.7},
		{Name: "c", Kind: "k_proj", Shape: []int{8, 8}, Paths: 1, BitsPerWeight: 3, RelErr: 0.1},
	}
	s := SummarizeByKind(reps)
	// up_proj: (1·64 + 2·192)/256 = 1.75 bits/weight, mean error 0.6, max 0.7; overall
	// (64 + 384 + 3·64)/320 = 2.
	if len(s) != 2 || s[0].Kind != "k_proj" || s[1].Kind != "up_proj" || s[1].Tensors != 2 || s[1].TwoPath != 1 ||
		s[1].BitsPerWeight != 1.75 || math.Abs(s[1].MeanRelErr-0.6) > 1e-15 || s[1].MaxRelErr != 0.7 {
		t.Fatalf("%+v", s)
	}
	var b strings.Builder
	if err := WriteTable(&b, reps); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"8×24", "up_proj             2         1     1.7500         0.6000    0.7000\n", "overall: 3 tensors, 2.0000 bits/weight"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "w.err") || strings.Contains(b.String(), "init") {
		t.Errorf("weighted or init columns without such errors:\n%s", b.String())
	}
	// With weighted and init errors (InitRefine with calibration): their columns, and the
	// kinds' means (up_proj: (0.4 + 0.6)/2 = 0.5 from (0.8 + 0.9)/2 = 0.85).
	reps[0].WeightedRelErr, reps[0].InitRelErr, reps[0].InitWeightedRelErr = 0.4, 0.55, 0.8
	reps[1].WeightedRelErr, reps[1].InitRelErr, reps[1].InitWeightedRelErr = 0.6, 0.75, 0.9
	if s := SummarizeByKind(reps); math.Abs(s[1].MeanWeightedRelErr-0.5) > 1e-15 || math.Abs(s[1].MeanInitWeightedRelErr-0.85) > 1e-15 || s[0].MeanWeightedRelErr != 0 {
		t.Fatalf("%+v", s)
	}
	b.Reset()
	if err := WriteTable(&b, reps); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rel.err     w.err  init rel    init w\n", "    1.0000    0.5000    0.4000    0.5500    0.8000\n",
		"mean w.err   init w.err\n", "0.7000       0.5000       0.8500\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestCompressSmallModel(t *testing.T) {
	if _, _, err := Model(nil, Options{}, nil); err == nil || !strings.Contains(err.Error(), "nil teacher") {
		t.Fatalf("nil teacher: %v", err)
	}
	if _, _, err := Model(cmf.NewModel(arch.Config{}), Options{}, nil); err == nil || !strings.Contains(err.Error(), "compress: ") {
		t.Fatalf("invalid config: %v", err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	m := cmf.NewModel(smallConfig(t, 32, 64))
	v := make([]float64, 64*32)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	up, _ := cmf.NewFloatTensor("model.layers.0.mlp.up_proj.weight", cmf.F32, []int{64, 32}, v)
	norm, _ := cmf.NewFloatTensor("model.norm.weight", cmf.F32, []int{32}, v[:32])
	m.Tensors[up.Name], m.Tensors[norm.Name] = up, norm
	s, reps, err := Model(m, Options{BitsPerWeight: 2, Paths: Paths1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 64×32 at 2 bits, one path: 16 + 192 + r·(2 + 8 + 4) ≤ 512 → r ≤ 21.7 → 16.
	if len(reps) != 1 || reps[0].Rank != 16 || reps[0].Paths != 1 || s.Tensors[up.Name].DType != cmf.BLR || s.Tensors[norm.Name] != norm {
		t.Fatalf("reports %+v", reps)
	}
}
