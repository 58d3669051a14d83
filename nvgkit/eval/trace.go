package eval

import (
	"bytes"
	"fmt"
	"math"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/host"
	"github.com/nvg-project/nvg/nvgkit"
)

// Trace runs teacher m's forward on ids (nb windows of t ids) and returns every hidden
// state, the per-token log-sum-exp, the top-k (1 ≤ k ≤ vocab; ≤ 64 on the GPU) and window 0's
// logits, in host.Trace's layout: with dev nil host.Net.Forward in float64, else
// nvgkit.Forward on dev (layers streamed when stream) with its f32 values widened. Errors: no
// windows, an id outside the vocabulary (CheckIDs), the path's (windows of unequal length,
// k out of range, the GPU's memory).
func Trace(dev *gpu.Device, m *cmf.Model, ids [][]int, k int, stream bool) (*host.Trace, error) {
	if len(ids) == 0 || len(ids[0]) == 0 {
		return nil, fmt.Errorf("eval.Trace: no windows, or an empty first window")
	}
	if err := CheckIDs(ids, m.Config.VocabSize); err != nil {
		return nil, fmt.Errorf("eval.Trace: %w", err)
	}
	if dev == nil {
		net, err := host.Load(m)
		if err != nil {
			return nil, err
		}
		return net.Forward(ids, host.ForwardOptions{TopK: k, Logits0: true})
	}
	net, work, err := load(dev, m, len(ids), len(ids[0]), stream, false)
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

// CheckStudent reports whether a student of architecture s can be distilled from (and traced
// against) a teacher of architecture t: the same config (vocabulary, hidden size, layers and
// layer kinds, heads and head sizes), else an error giving both's sizes.
func CheckStudent(t, s arch.Config) error {
	if !bytes.Equal(t.JSON(), s.JSON()) {
		return fmt.Errorf("the student's architecture differs from the teacher's (teacher vocab %d, hidden %d, %d layers; student vocab %d, hidden %d, %d layers)",
			t.VocabSize, t.HiddenSize, t.NumHiddenLayers, s.VocabSize, s.HiddenSize, s.NumHiddenLayers)
	}
	return nil
}

// StudentTrace is one student step of sm (a BLR student, or a dense model whose gains train)
// over ids (nb windows of t) against a teacher's top-k (topIDs and topLogProbs [nb·t·k], a
// Trace's, the log-probabilities renormalised over the k: Renormalised): the loss, the
// per-token KL, d loss/d input embeddings and the gradients of every trained vector, in
// host.StudentGrads' layout — with dev nil host.Net.StudentLossGrad in float64, else
// nvgkit.Step on dev from zeroed gradients, f32 values widened. Errors: CheckStudent's
// against teacher, top-k lists of another length, the path's.
func StudentTrace(dev *gpu.Device, teacher arch.Config, sm *cmf.Model, ids [][]int, topIDs []int, topLogProbs []float64, k int) (*host.StudentGrads, error) {
	if err := CheckStudent(teacher, sm.Config); err != nil {
		return nil, err
	}
	if len(ids) == 0 || len(topIDs) != len(ids)*len(ids[0])*k || len(topLogProbs) != len(topIDs) {
		return nil, fmt.Errorf("eval.StudentTrace: %d top-k ids and %d log-probabilities for %d windows with k = %d", len(topIDs), len(topLogProbs), len(ids), k)
	}
	prob := Renormalised(topLogProbs, k)
	if dev == nil {
		sn, err := host.Load(sm)
		if err != nil {
			return nil, err
		}
		return sn.StudentLossGrad(ids, topIDs, prob, k)
	}
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
	top := &nvgkit.TopK{NB: len(ids), T: len(ids[0]), K: k, IDs: make([]int32, len(topIDs)), Probs: make([]float32, len(prob))}
	for i := range prob {
		top.IDs[i], top.Probs[i] = int32(topIDs[i]), float32(prob[i])
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

// Renormalised returns exp(lp) renormalised over each token's k entries (lp [rows·k], natural
// log-probabilities), in float64: the teacher distribution a student is trained on.
func Renormalised(lp []float64, k int) []float64 {
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

// f64s widens f32 values.
func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// tensors collects the tensors of a trace file, keeping the first error.
type tensors struct {
	ts  []*cmf.Tensor
	err error
}

func (l *tensors) add(t *cmf.Tensor, err error) {
	if l.err == nil {
		l.ts, l.err = append(l.ts, t), err
	}
}

// TraceTensors returns tr, the trace of ids (nb windows of t) through a teacher of
// architecture cfg with top-k k, in the reference-fixture schema (testdata/fixtures): ids
// [nb,t] i64, hidden.0…hidden.L [nb,t,H] f32, logits_row0 [t,vocab] f32, logsumexp [nb,t]
// f64, teacher_topk_ids [nb,t,k] i64 and teacher_topk_logprob [nb,t,k] f64, in that order.
// Errors: a tr whose lengths do not match these shapes.
func TraceTensors(ids [][]int, tr *host.Trace, cfg arch.Config, k int) ([]*cmf.Tensor, error) {
	var l tensors
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
	return l.ts, l.err
}

// StudentTensors returns sg, StudentTrace's result for student sm over nb windows of t, in
// the reference-fixture schema: student_kl_per_token [nb,t] f64, student_loss [1] f64,
// grad.embeds [nb,t,H] f32, then grad.<name> f64 for every trained vector in sorted order (a
// gain in its tensor's shape, a BLR scale vector flat). Errors: lengths that do not match.
func StudentTensors(sg *host.StudentGrads, sm *cmf.Model, nb, t int) ([]*cmf.Tensor, error) {
	var l tensors
	l.add(cmf.NewFloatTensor("student_kl_per_token", cmf.F64, []int{nb, t}, sg.KLPerToken))
	l.add(cmf.NewFloatTensor("student_loss", cmf.F64, []int{1}, []float64{sg.Loss}))
	l.add(cmf.NewFloatTensor("grad.embeds", cmf.F32, []int{nb, t, sm.Config.HiddenSize}, sg.Embeds))
	for _, name := range sg.Names() {
		shape := []int{len(sg.Grads[name])}
		if st, ok := sm.Tensors[name]; ok {
			shape = st.Shape // a gain keeps its tensor's shape
		}
		l.add(cmf.NewFloatTensor("grad."+name, cmf.F64, shape, sg.Grads[name]))
	}
	return l.ts, l.err
}
