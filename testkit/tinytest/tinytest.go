// Package tinytest holds test fixtures built from the embedded tiny teacher
// (cmf/tinyteacher) and from models like it that the tests of several packages share, so
// that each package does not carry its own copy. Test code only (testkit: never imported by
// production code).
package tinytest

import (
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
)

// Poisoned writes a copy of the tiny teacher (config.json and model.safetensors) into a new
// temporary directory of t with element i of tensor name replaced by the little-endian
// bits (2 bytes for a BF16 or F16 tensor, 4 for F32), and returns the copy's
// model.safetensors path. The header is untouched, so the copy opens: only the values are
// bad. A tensor that is missing, an element outside it or bits of the wrong size fail t.
func Poisoned(t testing.TB, name string, i int, bits []byte) string {
	t.Helper()
	raw, err := fs.ReadFile(tinyteacher.FS(), "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := fs.ReadFile(tinyteacher.FS(), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(raw)
	var h map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+hlen], &h); err != nil {
		t.Fatal(err)
	}
	var e struct {
		DType       string  `json:"dtype"`
		DataOffsets []int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(h[name], &e); err != nil || len(e.DataOffsets) != 2 {
		t.Fatalf("tensor %s of the tiny teacher: %v (entry %s)", name, err, h[name])
	}
	size := map[string]int{"BF16": 2, "F16": 2, "F32": 4}[e.DType]
	if size != len(bits) {
		t.Fatalf("%s is %s: %d-byte elements, got %d bytes", name, e.DType, size, len(bits))
	}
	off := int64(i * size)
	if i < 0 || off+int64(size) > e.DataOffsets[1]-e.DataOffsets[0] {
		t.Fatalf("%s has no element %d", name, i)
	}
	out := append([]byte(nil), raw...)
	copy(out[8+int64(hlen)+e.DataOffsets[0]+off:], bits)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// SubModel returns m restricted to its decoder layers layers, renumbered 0, 1, … in that
// order, with the tensors outside the layers (embedding, final norm, head); the tensors are
// m's (no data is copied), the layers' under their new names. The result passes
// Model.Validate; a tensor name with a bad layer number or an invalid result fails t.
func SubModel(t testing.TB, m *cmf.Model, layers []int) *cmf.Model {
	t.Helper()
	c := m.Config
	c.NumHiddenLayers = len(layers)
	c.LayerTypes = nil
	for _, l := range layers {
		c.LayerTypes = append(c.LayerTypes, m.Config.LayerTypes[l])
	}
	out := cmf.NewModel(c)
	for name, tn := range m.Tensors {
		if rest, ok := strings.CutPrefix(name, "model.layers."); ok {
			dot := strings.IndexByte(rest, '.')
			l, err := strconv.Atoi(rest[:max(dot, 0)])
			if err != nil {
				t.Fatalf("tensor %s: %v", name, err)
			}
			i := slices.Index(layers, l)
			if i < 0 {
				continue
			}
			nt := *tn
			nt.Name = "model.layers." + strconv.Itoa(i) + rest[dot:]
			tn = &nt
		}
		if err := out.Set(tn); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.Validate(); err != nil {
		t.Fatal(err)
	}
	return out
}

// FirstLayers is SubModel of m's first n decoder layers.
func FirstLayers(t testing.TB, m *cmf.Model, n int) *cmf.Model {
	t.Helper()
	layers := make([]int, n)
	for i := range layers {
		layers[i] = i
	}
	return SubModel(t, m, layers)
}

// FixturePath is the HF float64 fixture file of the tiny teacher (ids, hidden states, top-k,
// log-sum-exp and the student fixtures; testdata/fixtures), relative to this package.
const FixturePath = "../../testdata/fixtures/fixtures-tiny-go.safetensors"

// Fixtures is the open fixture file.
type Fixtures struct{ File *cmf.SafetensorsFile }

// OpenFixtures opens the fixture file (found from this source file's directory, so that
// every package's tests can call it), closed when t ends.
func OpenFixtures(t testing.TB) Fixtures {
	t.Helper()
	_, src, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("tinytest: no caller information to find the fixtures")
	}
	f, err := cmf.OpenSafetensors(filepath.Join(filepath.Dir(src), FixturePath))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return Fixtures{f}
}

// Get returns the fixture tensor name as float64 values; when shape is given, the tensor
// must have it. A missing tensor or another shape fails t.
func (fx Fixtures) Get(t testing.TB, name string, shape ...int) []float64 {
	t.Helper()
	tn := fx.File.Tensor(name)
	if tn == nil {
		t.Fatalf("fixture %s missing", name)
	}
	if len(shape) > 0 && !slices.Equal(tn.Shape, shape) {
		t.Fatalf("fixture %s: shape %v, want %v", name, tn.Shape, shape)
	}
	v, err := tn.Float64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// IDs is Get of a tensor of token ids, as ints.
func (fx Fixtures) IDs(t testing.TB, name string, shape ...int) []int {
	t.Helper()
	v := fx.Get(t, name, shape...)
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// Windows returns the fixture's ids [nb, t] as nb windows of t tokens.
func (fx Fixtures) Windows(t testing.TB) [][]int {
	t.Helper()
	tn := fx.File.Tensor("ids")
	if tn == nil || len(tn.Shape) != 2 {
		t.Fatal("fixture ids missing or not [nb, t]")
	}
	flat := fx.IDs(t, "ids")
	nb, tt := tn.Shape[0], tn.Shape[1]
	w := make([][]int, nb)
	for b := range w {
		w[b] = flat[b*tt : (b+1)*tt : (b+1)*tt]
	}
	return w
}

// RelL2 is the relative L2 error ‖got − want‖₂ / ‖want‖₂, in float64 over len(want) values
// (got must have at least that many).
func RelL2[T float32 | float64](got []T, want []float64) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return math.Sqrt(num / den)
}

// CheckRelL2 logs the relative L2 error of got against the reference want and returns it; it
// fails t (without stopping it) when the lengths differ (the error is then +Inf) or the error
// is above tol (or NaN).
func CheckRelL2[T float32 | float64](t testing.TB, name string, got []T, want []float64, tol float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", name, len(got), len(want))
		return math.Inf(1)
	}
	e := RelL2(got, want)
	t.Logf("%-56s rel L2 err %.3g", name, e)
	if !(e <= tol) {
		t.Errorf("%s: relative L2 error %.3g > %g", name, e, tol)
	}
	return e
}
