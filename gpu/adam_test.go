package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
)

func f32(x float64) float64 { return float64(float32(x)) }

// TestAdam compares gpu.Adam with host.Adam (f64, same f32-representable hyper-parameters)
// over 3 steps, both modes, with and without a live mask (masked entries must be exactly 0
// in θ, m and v), on an awkward length with some tiny values so the relative step's floor
// (5 % of the live RMS) is active. Bounds per step (u = 2⁻²⁴), from the f32 operations:
// |δm| ≤ 3u·(β1|m₀| + (1−β1)|g|) (1−β1 is exact in f32); |δv| ≤ 4u·(β2 v₀ + (1−β2)g²);
// d = m·c1/(√(v·c2) + ε), where Vulkan allows sqrt 1/inversesqrt (2 ulp, then a 2.5-ulp
// division: ≤ 11u with the product and c2's rounding 13u) and division 2.5 ulp (5u, with m·c1
// and c1's rounding 7u): |δd| ≤ |δm|·c1/den + |d|·(√v̂·(|δv|/(2v) + 13u)/den + 7u); the
// floor's RMS has relative error (n/2 + 6)·u; θ' = θ − lr·s·d: |δθ'| ≤ lr·(s·|δd| + |d|·δs)
// + 3u·lr·|s d| + u·|θ'|. The host is re-seeded with the GPU's state each step, so errors
// do not compound across steps.
func TestAdam(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(81, 82))
	const u = 1.0 / (1 << 24)
	n := 777
	for _, rel := range []bool{false, true} {
		for _, masked := range []bool{false, true} {
			t.Run(fmt.Sprintf("relative=%v masked=%v", rel, masked), func(t *testing.T) {
				cfg := host.AdamConfig{LR: f32(0.01), Beta1: f32(0.9), Beta2: f32(0.999), Eps: f32(1e-8), Relative: rel}
				thf, _ := randF32(rng, n, 1)
				for i := 0; i < n; i += 7 {
					thf[i] *= 1e-3 // below the floor
				}
				mf, _ := randF32(rng, n, 0.1)
				vf := make([]float32, n)
				for i := range vf {
					vf[i] = float32(1e-4 + 0.01*rng.Float64())
				}
				var live []bool
				var liveU []uint32
				if masked {
					live = make([]bool, n)
					liveU = make([]uint32, n)
					for i := range live {
						live[i] = i%5 != 3
						if live[i] {
							liveU[i] = 1
						} else {
							thf[i], mf[i], vf[i] = 0, 0, 0
						}
					}
				}
				var bufs []*gpu.Buffer
				keep := func(b *gpu.Buffer) *gpu.Buffer { bufs = append(bufs, b); return b }
				defer func() {
					for _, b := range bufs {
						b.Release()
					}
				}()
				th := keep(must(d.UploadFloat32("theta", thf, n)).T(t))
				m := keep(must(d.UploadFloat32("m", mf, n)).T(t))
				v := keep(must(d.UploadFloat32("v", vf, n)).T(t))
				gb := keep(must(d.NewBuffer("grad", gpu.F32, n)).T(t))
				var lb *gpu.Buffer
				if masked {
					lb = keep(must(d.UploadUint32("live", liveU, n)).T(t))
				}
				for step := 1; step <= 3; step++ {
					gf, gd := randF32(rng, n, 1)
					must(0, d.WriteFloat32(gb, gf)).T(t)
					th0 := toF64(must(d.ReadFloat32(th)).T(t))
					m0 := toF64(must(d.ReadFloat32(m)).T(t))
					v0 := toF64(must(d.ReadFloat32(v)).T(t))
					if err := d.Run(func(r *gpu.Recorder) error {
						return gpu.Adam(r, th, gb, m, v, lb, step, gpu.AdamConfig(cfg))
					}); err != nil {
						t.Fatal(err)
					}
					wth, wm, wv := append([]float64(nil), th0...), append([]float64(nil), m0...), append([]float64(nil), v0...)
					if err := host.Adam(wth, gd, wm, wv, live, step, cfg); err != nil {
						t.Fatal(err)
					}
					var ss float64
					cnt := 0
					for i, x := range th0 {
						if live == nil || live[i] {
							ss += x * x
							cnt++
						}
					}
					rms := math.Sqrt(ss / float64(cnt))
					c1 := 1 / (1 - math.Pow(cfg.Beta1, float64(step)))
					c2 := 1 / (1 - math.Pow(cfg.Beta2, float64(step)))
					bth, bm, bv := make([]float64, n), make([]float64, n), make([]float64, n)
					for i := range bth {
						if live != nil && !live[i] {
							continue // exactly 0 required: bound 0
						}
						g := gd[i]
						bm[i] = 3 * u * (cfg.Beta1*math.Abs(m0[i]) + (1-cfg.Beta1)*math.Abs(g))
						bv[i] = 4 * u * (cfg.Beta2*v0[i] + (1-cfg.Beta2)*g*g)
						sq := math.Sqrt(wv[i] * c2)
						den := sq + cfg.Eps
						dd := wm[i] * c1 / den
						bd := bm[i]*c1/den + math.Abs(dd)*(sq*(bv[i]/(2*wv[i])+13*u)/den+7*u)
						s, bs := 1.0, 0.0
						if rel {
							fl := 0.05 * rms
							if math.Abs(th0[i]) >= fl {
								s = math.Abs(th0[i])
							} else {
								s, bs = fl, fl*(float64(n)/2+6)*u
							}
						}
						bth[i] = cfg.LR*(s*bd+math.Abs(dd)*bs) + 3*u*cfg.LR*math.Abs(s*dd) + u*math.Abs(wth[i])
					}
					checkBound(t, fmt.Sprintf("step %d θ", step), must(d.ReadFloat32(th)).T(t), wth, bth)
					checkBound(t, fmt.Sprintf("step %d m", step), must(d.ReadFloat32(m)).T(t), wm, bm)
					checkBound(t, fmt.Sprintf("step %d v", step), must(d.ReadFloat32(v)).T(t), wv, bv)
				}
			})
		}
	}
	p := must(d.NewBuffer("p", gpu.F32, 4)).T(t)
	q := must(d.NewBuffer("q", gpu.F32, 4)).T(t)
	defer p.Release()
	defer q.Release()
	r := d.Begin()
	defer r.Discard()
	ok := gpu.AdamConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}
	checkErrors(t, r, map[string]error{
		"step 0":     gpu.Adam(r, p, q, must(d.NewBuffer("m", gpu.F32, 4)).T(t), must(d.NewBuffer("v", gpu.F32, 4)).T(t), nil, 0, ok),
		"beta1 = 1":  gpu.Adam(r, p, q, p, q, nil, 1, gpu.AdamConfig{LR: 0.1, Beta1: 1, Beta2: 0.9, Eps: 1e-8}),
		"m is grad":  gpu.Adam(r, p, q, q, p, nil, 1, ok),
		"mask dtype": gpu.Adam(r, p, q, must(d.NewBuffer("m", gpu.F32, 4)).T(t), must(d.NewBuffer("v", gpu.F32, 4)).T(t), p, 1, ok),
	})
}

func toF64(v []float32) []float64 {
	o := make([]float64, len(v))
	for i, x := range v {
		o[i] = float64(x)
	}
	return o
}

// TestMultiTensorAdam runs three steps of MultiTensorAdam over vectors of awkward lengths
// (relative and plain, masked and not) and the same steps of Adam on a copy, one call per
// vector (Adam is checked against host.Adam in TestAdam): the two must be bit-identical in θ,
// m and v, since they share the arithmetic and the reduction order; the gaps between vectors
// in the arenas must stay 0.
func TestMultiTensorAdam(t *testing.T) {
	d := gputest.Open(t)
	rng := rand.New(rand.NewPCG(91, 92))
	lens := []int{1, 63, 64, 65, 777, 300}
	relative := []bool{true, false, true, true, false, true}
	masked := []bool{false, false, true, false, false, true}
	n := len(lens)
	type vec struct{ p, g, m, v, live *gpu.Buffer }
	var all []*gpu.Buffer
	keep := func(b *gpu.Buffer) *gpu.Buffer { all = append(all, b); return b }
	defer func() {
		for _, b := range all {
			b.Release()
		}
	}()
	ref, packed := make([]vec, n), make([]vec, n)
	for i, l := range lens {
		th, _ := randF32(rng, l, 1)
		for j := 0; j < l; j += 7 {
			th[j] *= 1e-3
		}
		m, _ := randF32(rng, l, 0.1)
		v := make([]float32, l)
		for j := range v {
			v[j] = float32(1e-4 + 0.01*rng.Float64())
		}
		var live []uint32
		if masked[i] {
			live = make([]uint32, l)
			for j := range live {
				if j%5 != 3 && j < l-10 {
					live[j] = 1
				} else {
					th[j], m[j], v[j] = 0, 0, 0
				}
			}
		}
		for _, x := range []*vec{&ref[i], &packed[i]} {
			name := fmt.Sprintf("vec%d", i)
			x.p = keep(must(d.UploadFloat32(name+".p", th, l)).T(t))
			x.g = keep(must(d.NewBuffer(name+".g", gpu.F32, l)).T(t))
			x.m = keep(must(d.UploadFloat32(name+".m", m, l)).T(t))
			x.v = keep(must(d.UploadFloat32(name+".v", v, l)).T(t))
			if live != nil {
				x.live = keep(must(d.UploadUint32(name+".live", live, l)).T(t))
			}
		}
	}
	col := func(f func(vec) *gpu.Buffer) []*gpu.Buffer {
		out := make([]*gpu.Buffer, n)
		for i := range packed {
			out[i] = f(packed[i])
		}
		return out
	}
	a, err := gpu.NewAdamArena(d, "arena", col(func(x vec) *gpu.Buffer { return x.p }), col(func(x vec) *gpu.Buffer { return x.g }),
		col(func(x vec) *gpu.Buffer { return x.m }), col(func(x vec) *gpu.Buffer { return x.v }),
		col(func(x vec) *gpu.Buffer { return x.live }), relative)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	rel := gpu.AdamConfig{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Relative: true}
	plain := gpu.AdamConfig{LR: 0.003, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	for step := 1; step <= 3; step++ {
		for i, l := range lens {
			g, _ := randF32(rng, l, 1)
			must(0, d.WriteFloat32(ref[i].g, g)).T(t)
			must(0, d.WriteFloat32(packed[i].g, g)).T(t)
		}
		must(0, d.Run(func(r *gpu.Recorder) error {
			for i, x := range ref {
				c := plain
				if relative[i] {
					c = rel
				}
				if err := gpu.Adam(r, x.p, x.g, x.m, x.v, x.live, step, c); err != nil {
					return err
				}
			}
			return nil
		})).T(t)
		r := d.Begin()
		must(0, gpu.MultiTensorAdam(r, a, step, rel, plain)).T(t)
		if r.Len() != 2 {
			t.Errorf("MultiTensorAdam recorded %d dispatches, want 2", r.Len())
		}
		must(0, r.Submit()).T(t)
		for i := range lens {
			for _, w := range []struct {
				name     string
				got, ref *gpu.Buffer
			}{{"θ", packed[i].p, ref[i].p}, {"m", packed[i].m, ref[i].m}, {"v", packed[i].v, ref[i].v}} {
				got := must(d.ReadFloat32(w.got)).T(t)
				want := must(d.ReadFloat32(w.ref)).T(t)
				for j := range got {
					if got[j] != want[j] {
						t.Fatalf("step %d vector %d %s[%d] = %g, Adam gives %g", step, i, w.name, j, got[j], want[j])
					}
				}
			}
		}
	}
	for _, arena := range []*gpu.Buffer{a.Param, a.M, a.V} {
		whole := must(d.ReadFloat32(arena)).T(t)
		for k := range whole {
			inside := false
			for i, o := range a.Offsets {
				inside = inside || (k >= o && k < o+lens[i])
			}
			if !inside && whole[k] != 0 {
				t.Fatalf("%s gap element %d = %g, want 0", arena.Label(), k, whole[k])
			}
		}
	}
	r := d.Begin()
	defer r.Discard()
	for name, err := range map[string]error{
		"nil arena":    gpu.MultiTensorAdam(r, nil, 1, rel, plain),
		"step 0":       gpu.MultiTensorAdam(r, a, 0, rel, plain),
		"swapped":      gpu.MultiTensorAdam(r, a, 1, plain, rel),
		"betas differ": gpu.MultiTensorAdam(r, a, 1, rel, gpu.AdamConfig{LR: 0.1, Beta1: 0.8, Beta2: 0.999, Eps: 1e-8}),
		"negative lr":  gpu.MultiTensorAdam(r, a, 1, gpu.AdamConfig{LR: -1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Relative: true}, plain),
		"eps 0 in f32": gpu.MultiTensorAdam(r, a, 1, gpu.AdamConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-50, Relative: true},
			gpu.AdamConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-50}),
		"lengths":       errOf(gpu.NewAdamArena(d, "x", []*gpu.Buffer{ref[0].p}, nil, nil, nil, nil, nil)),
		"length differ": errOf(gpu.NewAdamArena(d, "x", []*gpu.Buffer{ref[1].p}, []*gpu.Buffer{ref[0].g}, []*gpu.Buffer{ref[1].m}, []*gpu.Buffer{ref[1].v}, []*gpu.Buffer{nil}, []bool{true})),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if !strings.Contains(err.Error(), "gpu:") {
			t.Errorf("%s: %v lacks the package prefix", name, err)
		}
	}
	if r.Len() != 0 {
		t.Errorf("refused calls recorded %d dispatches", r.Len())
	}
}

func errOf[T any](_ T, err error) error { return err }
