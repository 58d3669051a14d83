package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() {
	register(&command{
		name:    "trace",
		summary: "run the forward on given token windows and write it in the reference-fixture schema (safetensors)",
		usage: "[--teacher MODEL] [--student STUDENT] --ids IDS.json -o OUT.safetensors [--k 32] [--host] [--stream]\n\n" +
			"IDS.json is a JSON array of windows of token ids, all of one length, e.g. [[1,2,3],[4,5,6]].\n" +
			"OUT holds ids [nb,t] i64, hidden.0..hidden.L [nb,t,H] f32 (hidden.0 the embeddings, hidden.L for\n" +
			"L < layers the output of layer L-1, the last one after the final norm), logsumexp [nb,t] f64,\n" +
			"teacher_topk_ids [nb,t,k] i64, teacher_topk_logprob [nb,t,k] f64 and logits_row0 [t,vocab] f32.\n" +
			"With --student, OUT also holds, for STUDENT against the teacher's top-k (renormalised over the k),\n" +
			"student_kl_per_token [nb,t] f64, student_loss [1] f64, grad.embeds [nb,t,H] f32 (d loss/d input\n" +
			"embeddings), grad.<gain> f64 for every RMSNorm gain and grad.<tensor>.p<i>.h|l|g f64 for every BLR\n" +
			"path (one student step's gradients: nvgkit.Step, or host.Net.StudentLossGrad with --host).\n" +
			"It runs on the GPU (f16 weights, f32 arithmetic; k ≤ 64) unless --host asks for the float64 host path.",
		run: runTrace,
	})
}

// readIDs reads IDS.json: a non-empty JSON array of equally long, non-empty windows of ids.
func readIDs(path string) ([][]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--ids: %v", err)
	}
	var ids [][]int
	if err := json.Unmarshal(b, &ids); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of windows of token ids: %w", path, err)
	}
	if len(ids) == 0 || len(ids[0]) == 0 {
		return nil, fmt.Errorf("%s: no windows, or an empty first window", path)
	}
	for i, w := range ids {
		if len(w) != len(ids[0]) {
			return nil, fmt.Errorf("%s: window %d has %d ids but window 0 has %d (windows must be of one length)", path, i, len(w), len(ids[0]))
		}
	}
	return ids, nil
}

// traceFlags are nvg trace's flags.
type traceFlags struct {
	teacher, ids, out, student string
	k                          int
	onHost, stream             bool
}

func (f *traceFlags) bind(c *command) *flag.FlagSet {
	fs := newFlags(c)
	fs.StringVar(&f.teacher, "teacher", "", "teacher model (default: the embedded tiny teacher)")
	fs.StringVar(&f.ids, "ids", "", "IDS.json: a JSON array of windows of token ids (required)")
	fs.StringVar(&f.out, "o", "", "output .safetensors file (required)")
	fs.IntVar(&f.k, "k", 32, "top-k ids and log-probs kept per token")
	fs.BoolVar(&f.onHost, "host", false, "compute on the host in float64 (reference path) instead of the GPU")
	fs.BoolVar(&f.stream, "stream", false, "GPU: stream the layers' weights (at most two layers on the GPU at once)")
	fs.StringVar(&f.student, "student", "", "student model (.cmf, BLR or dense): also write its loss and gradients against the teacher's top-k")
	return fs
}

// check validates k and the ids against the teacher's configuration.
func (f *traceFlags) check(ids [][]int, cfg arch.Config) error {
	if f.k < 1 || f.k > cfg.VocabSize {
		return usagef("--k must be in [1, vocab_size = %d], got %d", cfg.VocabSize, f.k)
	}
	for b, w := range ids {
		for i, id := range w {
			if id < 0 || id >= cfg.VocabSize {
				return fmt.Errorf("%s: window %d, position %d: id %d is outside the vocabulary [0, %d)", f.ids, b, i, id, cfg.VocabSize)
			}
		}
	}
	if !f.onHost && f.k > gpu.MaxTopK {
		return usagef("--k must be ≤ %d on the GPU, got %d (or pass --host)", gpu.MaxTopK, f.k)
	}
	return nil
}

func runTrace(args []string) error {
	c := commands["trace"]
	var f traceFlags
	fs := f.bind(c)
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if f.ids == "" || f.out == "" {
		return usagef("--ids and -o are required")
	}
	ids, err := readIDs(f.ids)
	if err != nil {
		return err
	}
	m, err := train.OpenModel(f.teacher)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := f.check(ids, m.Config); err != nil {
		return err
	}
	start := time.Now()
	tr, pathName, err := f.trace(m, ids)
	if err != nil {
		return err
	}
	var l tensorList
	l.addTrace(ids, tr, m.Config, f.k)
	meta := map[string]string{"producer": "nvg trace", "path": pathName, "model": train.ModelName(f.teacher), "k": fmt.Sprint(f.k)}
	if f.student != "" {
		if err := f.traceStudent(&l, m.Config, ids, tr); err != nil {
			return err
		}
		meta["student"] = f.student
	}
	if l.err != nil {
		return l.err
	}
	if err := cmf.WriteSafetensors(f.out, l.ts, meta); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d windows × %d tokens, %d hidden states, top-%d (%s, %.1fs)\n", f.out, tr.NB, tr.T, len(tr.Hidden), f.k, pathName, time.Since(start).Seconds())
	return nil
}

// trace runs the teacher's forward on the host or the GPU; it returns the trace and the
// path's name.
func (f *traceFlags) trace(m *cmf.Model, ids [][]int) (*host.Trace, string, error) {
	if !f.onHost {
		tr, err := gpuTrace(m, ids, f.k, f.stream)
		return tr, "gpu-f16", err
	}
	net, err := host.Load(m)
	if err != nil {
		return nil, "", err
	}
	tr, err := net.Forward(ids, host.ForwardOptions{TopK: f.k, Logits0: true})
	return tr, "host-f64", err
}

// traceStudent adds the student's loss and gradients against the teacher's top-k of tr.
func (f *traceFlags) traceStudent(l *tensorList, cfg arch.Config, ids [][]int, tr *host.Trace) error {
	sm, err := train.OpenModel(f.student)
	if err != nil {
		return err
	}
	defer sm.Close()
	if err := sameGeometry(cfg, sm.Config); err != nil {
		return fmt.Errorf("--student %s: %w", f.student, err)
	}
	var sg *host.StudentGrads
	if f.onHost {
		sn, err := host.Load(sm)
		if err != nil {
			return err
		}
		if sg, err = sn.StudentLossGrad(ids, tr.TopKIDs, renormalised(tr.TopKLogProbs, f.k), f.k); err != nil {
			return err
		}
	} else if sg, err = gpuStudentTrace(sm, ids, tr.TopKIDs, renormalised(tr.TopKLogProbs, f.k), f.k); err != nil {
		return err
	}
	nb, t, H := tr.NB, tr.T, cfg.HiddenSize
	l.add(cmf.NewFloatTensor("student_kl_per_token", cmf.F64, []int{nb, t}, sg.KLPerToken))
	l.add(cmf.NewFloatTensor("student_loss", cmf.F64, []int{1}, []float64{sg.Loss}))
	l.add(cmf.NewFloatTensor("grad.embeds", cmf.F32, []int{nb, t, H}, sg.Embeds))
	for _, name := range sg.Names() {
		shape := []int{len(sg.Grads[name])}
		if st, ok := sm.Tensors[name]; ok {
			shape = st.Shape // a gain keeps its tensor's shape
		}
		l.add(cmf.NewFloatTensor("grad."+name, cmf.F64, shape, sg.Grads[name]))
	}
	fmt.Printf("student %s: loss %.8g over %d tokens, %d gradients\n", f.student, sg.Loss, nb*t, len(sg.Grads))
	return nil
}

// tensorList collects the tensors of a trace file, keeping the first error.
type tensorList struct {
	ts  []*cmf.Tensor
	err error
}

func (l *tensorList) add(t *cmf.Tensor, err error) {
	if l.err == nil {
		l.ts, l.err = append(l.ts, t), err
	}
}

// addTrace adds the teacher's trace: ids, the hidden states, the first row's logits, the
// log-sum-exp and the top-k.
func (l *tensorList) addTrace(ids [][]int, tr *host.Trace, cfg arch.Config, k int) {
	nb, t, H, V := tr.NB, tr.T, cfg.HiddenSize, cfg.VocabSize
	flat := make([]int, 0, nb*t)
	for _, w := range ids {
		flat = append(flat, w...)
	}
	l.add(cmf.NewInt64Tensor("ids", []int{nb, t}, flat))
	for i, h := range tr.Hidden {
		l.add(cmf.NewFloatTensor(fmt.Sprintf("hidden.%d", i), cmf.F32, []int{nb, t, H}, h))
	}
	l.add(cmf.NewFloatTensor("logits_row0", cmf.F32, []int{t, V}, tr.Logits0))
	l.add(cmf.NewFloatTensor("logsumexp", cmf.F64, []int{nb, t}, tr.LogSumExp))
	l.add(cmf.NewInt64Tensor("teacher_topk_ids", []int{nb, t, k}, tr.TopKIDs))
	l.add(cmf.NewFloatTensor("teacher_topk_logprob", cmf.F64, []int{nb, t, k}, tr.TopKLogProbs))
}

// gpuTrace runs nvgkit.Forward on the GPU and returns its result in host.Trace's layout
// (float64 slices of the f32 values) so both paths write the same schema.
func gpuTrace(m *cmf.Model, ids [][]int, k int, stream bool) (*host.Trace, error) {
	dev, err := openDevice()
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	net, work, err := loadGPU(dev, m, len(ids), len(ids[0]), stream, false)
	if err != nil {
		return nil, err
	}
	defer net.Release()
	defer work.Release()
	g, err := nvgkit.Forward(net, work, ids, nvgkit.ForwardOptions{TopK: k, Logits0: true})
	if err != nil {
		return nil, err
	}
	tr := &host.Trace{NB: g.NB, T: g.T, LogSumExp: f64s(g.LSE), TopKLogProbs: f64s(g.TopK.LogProbs), Logits0: f64s(g.Logits0)}
	for _, h := range g.Hidden {
		tr.Hidden = append(tr.Hidden, f64s(h))
	}
	tr.TopKIDs = make([]int, len(g.TopK.IDs))
	for i, id := range g.TopK.IDs {
		tr.TopKIDs[i] = int(id)
	}
	return tr, nil
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// sameGeometry reports whether a student's architecture can be distilled from the
// teacher's: same vocabulary, hidden size, layers and layer kinds, heads and head sizes.
func sameGeometry(t, s arch.Config) error {
	if !bytes.Equal(t.JSON(), s.JSON()) {
		return fmt.Errorf("the student's architecture differs from the teacher's (teacher vocab %d, hidden %d, %d layers; student vocab %d, hidden %d, %d layers)",
			t.VocabSize, t.HiddenSize, t.NumHiddenLayers, s.VocabSize, s.HiddenSize, s.NumHiddenLayers)
	}
	return nil
}

// renormalised returns exp(lp) renormalised over each token's k entries (float64).
func renormalised(lp []float64, k int) []float64 {
	out := make([]float64, len(lp))
	for r := 0; r+k <= len(lp); r += k {
		m := math.Inf(-1)
		for _, v := range lp[r : r+k] {
			m = math.Max(m, v)
		}
		var s float64
		for j, v := range lp[r : r+k] {
			out[r+j] = math.Exp(v - m)
			s += out[r+j]
		}
		for j := range k {
			out[r+j] /= s
		}
	}
	return out
}

// gpuStudentTrace runs one nvgkit.Step of the student sm over ids against the teacher's
// top-k (tid, prob [nb·t·k]) on the GPU and returns its loss and gradients in
// host.StudentGrads' layout (float64 copies of the f32 values).
func gpuStudentTrace(sm *cmf.Model, ids [][]int, tid []int, prob []float64, k int) (*host.StudentGrads, error) {
	dev, err := openDevice()
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	net, err := nvgkit.LoadNet(dev, sm, nvgkit.Student)
	if err != nil {
		return nil, err
	}
	defer net.Release()
	work, err := nvgkit.NewWork(dev, net, len(ids), len(ids[0]))
	if err != nil {
		return nil, err
	}
	defer work.Release()
	top := &nvgkit.TopK{NB: len(ids), T: len(ids[0]), K: k, IDs: make([]int32, len(tid)), Probs: make([]float32, len(prob))}
	for i := range tid {
		top.IDs[i], top.Probs[i] = int32(tid[i]), float32(prob[i])
	}
	if err := nvgkit.ZeroGrads(net); err != nil {
		return nil, err
	}
	st, err := nvgkit.Step(net, work, ids, top)
	if err != nil {
		return nil, err
	}
	emb, err := nvgkit.EmbedGrads(work)
	if err != nil {
		return nil, err
	}
	grads, err := nvgkit.Grads(net)
	if err != nil {
		return nil, err
	}
	sg := &host.StudentGrads{Loss: st.Loss, KLPerToken: f64s(st.KLPerToken), Embeds: f64s(emb), Grads: map[string][]float64{}}
	for name, g := range grads {
		sg.Grads[name] = f64s(g)
	}
	return sg, nil
}
