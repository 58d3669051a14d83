package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvg-project/nvg/cmf"
)

const fixtures = "../../testdata/fixtures/fixtures-tiny-go.safetensors"

func TestUsageErrorsExit2(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"nosuchcommand"},
		{"info", "--bogus"},
		{"info", filepath.Join(dir, "missing")},
		{"info", dir}, // a directory without config.json
		{"import", dir},
		{"eval", "--windows", "zero"},
		{"trace", "--ids", filepath.Join(dir, "missing.json"), "-o", filepath.Join(dir, "o.safetensors")},
		{"trace"},
	} {
		if code := run(args); code != 2 {
			t.Errorf("nvg %v: exit %d, want 2", args, code)
		}
	}
}

// TestTraceMatchesFixtures runs `nvg trace` on the fixture's ids and compares every output
// tensor with the HF float64 reference.
func TestTraceMatchesFixtures(t *testing.T) {
	ref, err := cmf.OpenSafetensors(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	idsT := ref.Tensor("ids")
	idv, err := idsT.Float64()
	if err != nil {
		t.Fatal(err)
	}
	nb, tt := idsT.Shape[0], idsT.Shape[1]
	ids := make([][]int, nb)
	for b := range ids {
		for i := 0; i < tt; i++ {
			ids[b] = append(ids[b], int(idv[b*tt+i]))
		}
	}
	dir := t.TempDir()
	idsPath, out := filepath.Join(dir, "ids.json"), filepath.Join(dir, "trace.safetensors")
	b, _ := json.Marshal(ids)
	if err := os.WriteFile(idsPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"trace", "--ids", idsPath, "-o", out}); code != 0 {
		t.Fatalf("nvg trace: exit %d", code)
	}
	got, err := cmf.OpenSafetensors(out)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	for _, name := range []string{"ids", "hidden.0", "hidden.4", "hidden.8", "logits_row0", "logsumexp", "teacher_topk_logprob"} {
		g, w := got.Tensor(name), ref.Tensor(name)
		if g == nil {
			t.Fatalf("trace output lacks %s", name)
		}
		if !sameInts(g.Shape, w.Shape) {
			t.Fatalf("%s: shape %v, want %v", name, g.Shape, w.Shape)
		}
		gv, _ := g.Float64()
		wv, _ := w.Float64()
		var maxErr, maxAbs float64
		for i := range wv {
			maxErr = math.Max(maxErr, math.Abs(gv[i]-wv[i]))
			maxAbs = math.Max(maxAbs, math.Abs(wv[i]))
		}
		if maxErr > 1e-4*math.Max(maxAbs, 1e-30) {
			t.Errorf("%s: max error %.3g (max |ref| %.3g)", name, maxErr, maxAbs)
		}
	}
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
