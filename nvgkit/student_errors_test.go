package nvgkit_test

import (
	"math"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/optim"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// TestStudentErrors checks that bad input to the student API is refused with an error that
// names what is wrong, before anything is submitted: the gradients stay zero and the device
// holds the same bytes afterwards.
func TestStudentErrors(t *testing.T) {
	_, m, tnet := kittest.TinyTeacher(t)
	dev, net := fixtureStudent(t)
	V := net.Config.VocabSize
	const nb, T, K = 2, 8, 4
	w := newWork(t, dev, net, nb, T)
	defer w.Release()
	tw := newWork(t, dev, tnet, nb, T)
	defer tw.Release()
	ids := [][]int{{1, 2, 3, 4, 5, 6, 7, 8}, {9, 10, 11, 12, 13, 14, 15, 16}}
	mkTop := func(nb, T, K int) *nvgkit.TopK {
		top := &nvgkit.TopK{NB: nb, T: T, K: K}
		for r := 0; r < nb*T; r++ {
			for j := 0; j < K; j++ {
				top.IDs = append(top.IDs, int32(100+j))
				top.Probs = append(top.Probs, 1/float32(K))
			}
		}
		return top
	}
	good := mkTop(nb, T, K)
	if err := nvgkit.ZeroGrads(net); err != nil {
		t.Fatal(err)
	}
	before := liveMem(dev)
	bad := func(name, want string, err error) { t.Helper(); refused(t, name, want, err) }
	step := func(ids [][]int, top *nvgkit.TopK) error { _, err := nvgkit.Step(net, w, ids, top); return err }
	loss := func(ids [][]int, top *nvgkit.TopK) error { _, _, err := nvgkit.LossOnly(net, w, ids, top); return err }
	for _, f := range []struct {
		name string
		run  func([][]int, *nvgkit.TopK) error
	}{{"Step", step}, {"LossOnly", loss}} {
		bad(f.name+" id = vocab", "outside the vocabulary", f.run([][]int{ids[0], {1, 2, 3, 4, 5, 6, 7, V}}, good))
		bad(f.name+" negative id", "token 0 of window 1", f.run([][]int{ids[0], {-1, 2, 3, 4, 5, 6, 7, 8}}, good))
		bad(f.name+" windows over the work", "3 windows", f.run([][]int{ids[0], ids[1], ids[0]}, mkTop(3, T, K)))
		bad(f.name+" window longer than t", "want t = 8", f.run([][]int{ids[0], append(ids[1], 3)}, good))
		bad(f.name+" nil top-k", "nil top-k", f.run(ids, nil))
		bad(f.name+" top-k windows", "holds 1 windows", f.run(ids, mkTop(1, T, K)))
		bad(f.name+" top-k window length", "windows of 16 tokens", f.run(ids, mkTop(nb, 16, K)))
		short := mkTop(nb, T, K)
		short.IDs = short.IDs[:len(short.IDs)-1]
		bad(f.name+" top-k ids length", "IDs has 63", f.run(ids, short))
		wrongK := mkTop(nb, T, K)
		wrongK.K = 5
		bad(f.name+" top-k K vs lengths", "want NB·T·K", f.run(ids, wrongK))
		geo := mkTop(nb, T, K)
		geo.IDs[7] = int32(V + 10)
		bad(f.name+" teacher id outside the student's vocabulary", "student's vocabulary", f.run(ids, geo))
		dup := mkTop(nb, T, K)
		dup.IDs[K+1] = dup.IDs[K]
		bad(f.name+" repeated teacher id", "appears twice in token 1", f.run(ids, dup))
		nan := mkTop(nb, T, K)
		nan.Probs[3] = float32(math.NaN())
		bad(f.name+" NaN probability", "not finite", f.run(ids, nan))
		zero := mkTop(nb, T, K)
		for j := 0; j < K; j++ {
			zero.Probs[2*K+j] = 0
		}
		bad(f.name+" zero probabilities", "token 2 sum to 0", f.run(ids, zero))
	}
	bad("Step over fewer windows than the work", "exactly the work's nb = 2", step(ids[:1], mkTop(1, T, K)))
	_, err := nvgkit.Step(net, tw, ids, good)
	bad("student with a teacher's work", "made for a teacher net", err)
	_, _, err = nvgkit.LossOnly(tnet, tw, ids, good)
	bad("LossOnly on a teacher", "is a teacher", err)
	_, err = nvgkit.TeacherTopK(net, w, ids, 4)
	bad("TeacherTopK on a student", "runs a Teacher net", err)
	_, _, err = nvgkit.NLL(net, w, [][]int{append(ids[0], 1)}, nil)
	bad("NLL on a student", "runs a Teacher net", err)
	bad("ZeroGrads on a teacher", "is a teacher", nvgkit.ZeroGrads(tnet))
	cfg := optim.Default()
	cfg.Beta1 = 1
	bad("Adam beta1 = 1", "Beta1", nvgkit.Adam(net, cfg, cfg.LR, 1))
	cfg = optim.Default()
	bad("Adam infinite lr", "lr = +Inf", nvgkit.Adam(net, cfg, math.Inf(1), 1))
	bad("Adam negative lr", "lr = -1", nvgkit.Adam(net, cfg, -1, 1))
	bad("Adam step 0", "step = 0", nvgkit.Adam(net, cfg, cfg.LR, 0))
	cfg.Eps = 5e-324 // > 0 in float64, 0 in f32: every value would become NaN
	bad("Adam eps rounding to 0 in f32", "Eps", nvgkit.Adam(net, cfg, cfg.LR, 1))
	_, err = nvgkit.ClipGrads(net, 0)
	bad("ClipGrads 0", "maxNorm", err)
	bad("Restore nil", "nil snapshot", nvgkit.Restore(net, nil))
	_, err = nvgkit.LoadNet(dev, m, nvgkit.Student, nvgkit.StreamLayers())
	bad("streamed student", "StreamLayers is for teachers", err)
	_, err = nvgkit.Export(net, tinytest.FirstLayers(t, m, 4))
	bad("Export into another architecture", "architecture differs", err)
	_, err = nvgkit.Export(net, nil)
	bad("Export nil model", "nil model", err)
	_, err = nvgkit.EmbedGrads(tw)
	bad("EmbedGrads of a teacher's work", "teacher net", err)

	after := liveMem(dev)
	if after.CurrentBytes != before.CurrentBytes {
		t.Errorf("device bytes %d before, %d after the refused calls", before.CurrentBytes, after.CurrentBytes)
	}
	if n, err := nvgkit.GradNorm(net); err != nil || n != 0 {
		t.Errorf("gradient norm after refused calls = %g, %v; want 0", n, err)
	}
}

// TestStudentLoadErrors checks that LoadNet(…, Student) names a malformed BLR tensor and
// leaves nothing allocated on the GPU.
func TestStudentLoadErrors(t *testing.T) {
	d, m, _ := kittest.TinyTeacher(t)
	base := tinytest.FirstLayers(t, m, 1)
	before := liveMem(d)
	for _, c := range []struct {
		name, tensor string
		payload      []byte
		want         string
	}{
		{"bad magic", "model.layers.0.mlp.up_proj.weight", make([]byte, 64), "magic byte"},
		{"short payload", "model.layers.0.linear_attn.out_proj.weight", []byte{0x4C, 1}, "shorter than the 16-byte header"},
	} {
		bm := cmf.NewModel(base.Config)
		for _, tn := range base.Tensors {
			if err := bm.Set(tn); err != nil {
				t.Fatal(err)
			}
		}
		shape := base.Tensors[c.tensor].Shape
		nt, err := cmf.NewTensor(c.tensor, cmf.BLR, shape, c.payload)
		if err != nil {
			t.Fatal(err)
		}
		if err := bm.Set(nt); err != nil {
			t.Fatal(err)
		}
		n, err := nvgkit.LoadNet(d, bm, nvgkit.Student)
		if err == nil {
			n.Release()
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.tensor) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not name %s and %q", c.name, err, c.tensor, c.want)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
	if after := liveMem(d); after.CurrentBytes != before.CurrentBytes || after.Buffers != before.Buffers {
		t.Errorf("failed loads left %d bytes in %d buffers (before: %d in %d)", after.CurrentBytes, after.Buffers, before.CurrentBytes, before.Buffers)
	}
}
