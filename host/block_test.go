package host

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/arch"
)

// TestBlockLossFiniteDifferences checks the block-wise reconstruction objective on the BLR
// student of TestStudentBLRFiniteDifferences (layers [GatedDeltaNet, attention]) against
// the uncompressed teacher's layer outputs: for each layer l, BlockLoss is the mean
// normalised MSE of the student's own layer-l output (its forward through layers 0…l) against
// the target; BlockLossGrad's gradients cover exactly layer l's gains and BLR scales; every
// one of them, at sampled coordinates, matches central differences of BlockLoss. Bad
// arguments are refused, naming what is wrong.
func TestBlockLossFiniteDifferences(t *testing.T) {
	s := newBLRStudent(t, subTeacher(t, []int{2, 3}), 1, 10, 8)
	c := s.teach.Config
	rows, H := len(s.ids)*len(s.ids[0]), c.HiddenSize
	x, err := Embedding(s.teach.Embed, c.VocabSize, H, s.ids[0])
	if err != nil {
		t.Fatal(err)
	}
	var targets [][]float64
	for l := range s.teach.Layers {
		if x, err = s.teach.Layer(l, x, 1, rows); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, x)
	}
	linears, gains := subStudentParams(t, s)
	rng := rand.New(rand.NewPCG(42, 9))
	for l := range s.net.Layers {
		t.Run("layer="+strconv.Itoa(l), func(t *testing.T) {
			bg, err := s.net.BlockLossGrad(s.ids, l, targets[l])
			if err != nil {
				t.Fatal(err)
			}
			xs, err := Embedding(s.net.Embed, c.VocabSize, H, s.ids[0])
			if err != nil {
				t.Fatal(err)
			}
			for j := 0; j <= l; j++ {
				if xs, err = s.net.Layer(j, xs, 1, rows); err != nil {
					t.Fatal(err)
				}
			}
			e, _, err := HiddenLoss(xs, targets[l], rows, H, false)
			if err != nil {
				t.Fatal(err)
			}
			var want float64
			for _, v := range e {
				want += v / float64(rows)
			}
			t.Logf("layer %d: reconstruction error %.6g", l, bg.Loss)
			if math.Abs(bg.Loss-want) > 1e-12*want || !(want > 1e-3) {
				t.Errorf("Loss %.17g, want the mean normalised MSE of the student's own output %.17g (> 1e-3)", bg.Loss, want)
			}
			if lo, _, err := s.net.BlockLoss(s.ids, l, targets[l]); err != nil || lo != bg.Loss {
				t.Errorf("BlockLoss %.17g (%v), BlockLossGrad's %.17g", lo, err, bg.Loss)
			}
			prefix := "model.layers." + strconv.Itoa(l) + "."
			want2 := 0
			for name := range linears {
				if strings.HasPrefix(name, prefix) {
					want2 += 3 * len(linears[name].(*BLRLinear).W.Paths)
				}
			}
			for name := range gains {
				if strings.HasPrefix(name, prefix) {
					want2++
				}
			}
			for _, name := range bg.Names() {
				if !strings.HasPrefix(name, prefix) {
					t.Errorf("gradient of %s, outside layer %d", name, l)
				}
			}
			if len(bg.Grads) != want2 {
				t.Errorf("%d gradients, want %d (every gain and BLR scale vector of layer %d)", len(bg.Grads), want2, l)
			}
			loss := func() float64 {
				v, _, err := s.net.BlockLoss(s.ids, l, targets[l])
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			const tol = 1e-4
			var st fdStats
			names := make([]string, 0, len(linears))
			for name := range linears {
				if strings.HasPrefix(name, prefix) {
					names = append(names, name)
				}
			}
			sort.Strings(names)
			for _, name := range names {
				b := linears[name].(*BLRLinear)
				for p := range b.W.Paths {
					q := &b.W.Paths[p]
					for _, sc := range []struct {
						key string
						v   []float32
					}{{"h", q.H}, {"l", q.L}, {"g", q.G}} {
						g := bg.Grads[arch.MetricName(name, p, sc.key)]
						v := sc.v
						st.check(t, arch.MetricName(name, p, sc.key), g, sampleCoords(rng, g, 2),
							func(i int) float64 { return float64(v[i]) },
							func(i int, x float64) { v[i] = float32(x) }, 1e-3, 1e-5, tol, loss)
					}
				}
			}
			for name, w := range gains {
				if !strings.HasPrefix(name, prefix) {
					continue
				}
				g := bg.Grads[name]
				st.check(t, name, g, sampleCoords(rng, g, 2),
					func(i int) float64 { return w[i] }, func(i int, x float64) { w[i] = x }, 0, 1e-4, tol, loss)
			}
			t.Logf("layer %d: %d coordinates, worst error %.3g at %s", l, st.count, st.worst, st.where)
		})
	}
	for _, bad := range []struct {
		l      int
		target []float64
		want   string
	}{{2, targets[0], "layer 2 is outside [0, 2)"}, {-1, targets[0], "layer -1"}, {0, targets[0][:7], "has 7 values"}} {
		if _, err := s.net.BlockLossGrad(s.ids, bad.l, bad.target); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("layer %d, %d target values: %v, want an error containing %q", bad.l, len(bad.target), err, bad.want)
		}
	}
}
