package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// TestStager uploads layers of odd-sized f32, f16 and u32 buffers (f16 with an odd element
// count: a padded last word; u32 as an 8-bit weight's packed codes) through a two-slot stager, more layers than slots, and reads every
// buffer back bit for bit; then the error cases, which must leave the stager usable.
func TestStager(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(1, 2))
	s, err := d.NewStager(1<<16, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	type layer struct {
		f32 *gpu.Buffer
		f16 *gpu.Buffer
		u32 *gpu.Buffer
		a   []float32
		b   []uint16
		c   []uint32
	}
	var layers []layer
	for l := range 5 {
		na, nb := 1000+37*l, 2001+2*l
		a, _ := randF32(rng, na, 3)
		b, _ := randF16(rng, nb, 3)
		c := make([]uint32, 333+l)
		for i := range c {
			c[i] = rng.Uint32()
		}
		L := layer{
			f32: must(d.NewBuffer(fmt.Sprint("a", l), gpu.F32, na)).T(t),
			f16: must(d.NewBuffer(fmt.Sprint("b", l), gpu.F16, nb)).T(t),
			u32: must(d.NewBuffer(fmt.Sprint("c", l), gpu.U32, len(c))).T(t),
			a:   a, b: b, c: c,
		}
		if err := s.Upload([]gpu.StagerUpload{{Dst: L.f32, F32: a}, {Dst: L.f16, F16: b}, {Dst: L.u32, U32: c}}); err != nil {
			t.Fatalf("layer %d: %v", l, err)
		}
		layers = append(layers, L)
	}
	for l, L := range layers {
		if got := must(d.ReadFloat32(L.f32)).T(t); !slices.Equal(got, L.a) {
			t.Errorf("layer %d: f32 buffer differs from its upload", l)
		}
		if got := must(d.ReadF16(L.f16)).T(t); !slices.Equal(got, L.b) {
			t.Errorf("layer %d: f16 buffer differs from its upload", l)
		}
		if got := must(d.ReadUint32(L.u32)).T(t); !slices.Equal(got, L.c) {
			t.Errorf("layer %d: u32 buffer differs from its upload", l)
		}
	}
	small := must(d.NewBuffer("small", gpu.F32, 4)).T(t)
	big := must(d.NewBuffer("big", gpu.F32, 1<<15)).T(t)
	gone := must(d.NewBuffer("gone", gpu.F32, 4)).T(t)
	gone.Release()
	for _, c := range []struct {
		name  string
		items []gpu.StagerUpload
		want  string
	}{
		{"too long", []gpu.StagerUpload{{Dst: small, F32: make([]float32, 5)}}, "values for buffer"},
		{"wrong dtype", []gpu.StagerUpload{{Dst: small, F16: make([]uint16, 4)}}, "values for buffer"},
		{"u32 into f32", []gpu.StagerUpload{{Dst: small, U32: make([]uint32, 4)}}, "values for buffer"},
		{"above slot", []gpu.StagerUpload{{Dst: big, F32: make([]float32, 1<<15)}}, "above the slot"},
		{"released", []gpu.StagerUpload{{Dst: gone, F32: make([]float32, 4)}}, "released"},
	} {
		if err := s.Upload(c.items); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
	want := []float32{1, 2, 3, 4}
	if err := s.Upload([]gpu.StagerUpload{{Dst: small, F32: want}}); err != nil {
		t.Fatalf("after the errors: %v", err)
	}
	if got := must(d.ReadFloat32(small)).T(t); !slices.Equal(got, want) {
		t.Errorf("after the errors: got %v, want %v", got, want)
	}
	if _, err := d.NewStager(16, 0); err == nil {
		t.Error("NewStager with 0 slots: no error")
	}
	s.Release()
	if err := s.Upload([]gpu.StagerUpload{{Dst: small, F32: want}}); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("upload through a released stager: err = %v", err)
	}
}

// BenchmarkStreamUpload streams layers of NVG_BENCH_LAYER_MIB MiB (default 512; f16 planes
// in a layer's proportions) as the streamed teacher pass does: fresh buffers per layer,
// released after the layer's work, with a GEMM of about the layer's teacher work submitted
// before each upload. It compares Queue.WriteBuffer (Device.UploadF16) with a two-slot
// Stager, and each alone with the GEMM alone, printing GB/s and the wall time per layer
// (UPLOAD lines). Run on a GPU with -benchtime 1x.
func BenchmarkStreamUpload(b *testing.B) {
	d := gputest.Open(b)
	mib := 512
	if v, err := strconv.Atoi(os.Getenv("NVG_BENCH_LAYER_MIB")); err == nil && v > 0 {
		mib = v
	}
	const layers = 8
	// Seven planes in the proportions of a Qwen3.5 layer (attention q,k,v,o; MLP gate,up,down).
	parts := []int{4, 1, 1, 4, 12, 12, 12}
	sum := 0
	for _, p := range parts {
		sum += p
	}
	unit := mib << 20 / 2 / sum // f16 elements per part unit
	var planes [][]uint16
	for _, p := range parts {
		v := make([]uint16, p*unit)
		for i := range v {
			v[i] = uint16(i * 2654435761 >> 7)
		}
		planes = append(planes, v)
	}
	bytes := 0.0
	for _, p := range planes {
		bytes += float64((2*len(p) + 3) &^ 3)
	}
	// The GEMM: 4 × n³ (n = NVG_BENCH_GEMM_N, default 4096: ~0.55 TFLOP ≈ a 27B layer's
	// teacher work over 8 × 512 tokens).
	n := 4096
	if v, err := strconv.Atoi(os.Getenv("NVG_BENCH_GEMM_N")); err == nil && v > 0 {
		n = v
	}
	x := must(d.NewBuffer("x", gpu.F32, n, n)).T(b)
	y := must(d.NewBuffer("y", gpu.F32, n, n)).T(b)
	w := must(d.NewBuffer("w", gpu.F16, n, n)).T(b)
	defer func() { x.Release(); y.Release(); w.Release() }()
	compute := func() {
		if err := d.Run(func(r *gpu.Recorder) error {
			for range 4 {
				if err := gpu.Linear(r, x, w, y, n, n, n); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	stager, err := d.NewStager(uint64(bytes), 2)
	if err != nil {
		b.Fatal(err)
	}
	defer stager.Release()
	upload := map[string]func() ([]*gpu.Buffer, error){
		"write": func() ([]*gpu.Buffer, error) {
			var out []*gpu.Buffer
			for i, p := range planes {
				buf, err := d.UploadF16(fmt.Sprint("plane", i), p, len(p))
				if err != nil {
					return out, err
				}
				out = append(out, buf)
			}
			return out, nil
		},
		"stager": func() ([]*gpu.Buffer, error) {
			var out []*gpu.Buffer
			var items []gpu.StagerUpload
			for i, p := range planes {
				buf, err := d.NewBuffer(fmt.Sprint("plane", i), gpu.F16, len(p))
				if err != nil {
					return out, err
				}
				out = append(out, buf)
				items = append(items, gpu.StagerUpload{Dst: buf, F16: p})
			}
			return out, stager.Upload(items)
		},
	}
	for _, mode := range []string{"compute", "write", "stager", "compute+write", "compute+stager"} {
		b.Run(mode, func(b *testing.B) {
			withCompute := strings.HasPrefix(mode, "compute")
			up := upload[strings.TrimPrefix(mode, "compute+")]
			pass := func() {
				for range layers {
					if withCompute {
						compute()
					}
					if up != nil {
						bufs, err := up()
						for _, buf := range bufs {
							buf.Release()
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := d.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			pass() // warm-up
			for b.Loop() {
				start := time.Now()
				pass()
				el := time.Since(start).Seconds()
				gbs := 0.0
				if up != nil {
					gbs = bytes * layers / el / 1e9
				}
				fmt.Printf("UPLOAD %-16s layer %d MiB: %.1f ms per layer, %.1f GB/s\n", mode, mib, el/layers*1e3, gbs)
			}
		})
	}
}
