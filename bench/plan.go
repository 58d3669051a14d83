package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
)

// Plan is what a benchmark geometry needs, computed from its config alone (no
// device): parameter and bit counts, and the GPU bytes of one phase (a teacher pass or a
// student step) over nb windows of t tokens. See Memory.
type Plan struct {
	// Params is the model's weight count as HF counts it: embedding, the untied head, every
	// layer's projections, norms, conv, A_log and dt_bias, the final norm.
	Params int64
	// BLRWeights is the number of weights (m·n summed) of the projections a Student holds in
	// BLR form; DenseWeights the rest of the decoder projections (in_proj_a/b).
	BLRWeights, DenseWeights int64
	// BLRBits is the size in bits of those projections in the .cmf BLR payload (DESIGN.md §4:
	// a 16-byte header, then per path h, g, ℓ in f16 and the U, V sign bits), so
	// BitsPerWeight = BLRBits / BLRWeights is comparable with the peer's ~1 bit target.
	BLRBits int64
	// SignBits is the sign bits alone (Σ paths · (m·r + r·n)).
	SignBits int64
	// Trainables is a Student's trained values (every path's h, ℓ, g and every norm gain).
	Trainables int64
	// WeightBytes is the GPU bytes of the net's weights during the phase: all of them when
	// resident; when streamed, the final norm and the larger of the two largest layers and
	// the two largest head blocks (the embedding and the head stay on the host; the head goes
	// up HeadBlockRows vocabulary rows at a time, nvgkit.StreamLayers).
	WeightBytes uint64
	// UploadBytes is what a streamed teacher uploads per pass (nvgkit.Net.UploadedBytes):
	// every layer's weights and the f16 head; 0 when resident.
	UploadBytes uint64
	// HeadBlockRows is a streamed teacher's head block (nvgkit.HeadBlockRows for the plan's
	// logits slice; the last block may be smaller); 0 when resident.
	HeadBlockRows int
	// StateBytes is a Student's gradients, Adam moments and arena tags (nvgkit.Net.StateBytes: 16
	// bytes per trained value + 4).
	StateBytes uint64
	// WorkBytes is the activation buffers (NewWork) and the top-k buffers (8·rows·k bytes).
	WorkBytes uint64
	// TempBytes estimates the largest set of recorder temporaries of one submit: the head's
	// logits slice (at most 64 MiB) and, for a Student, one layer's kept t1 and c
	// (4·rows·(r + m)·P per projection but down_proj) and BLRBackward's borrowed dt2 and dxg
	// (and down_proj's c and t1; one set per size, shared by the layer's calls). Sign
	// learning's dt2 and GatedDeltaRuleBackward's scratch are not included.
	TempBytes uint64
	// Largest is the largest single buffer (LargestName): it must fit maxBufferSize.
	Largest     uint64
	LargestName string
	// LargestBound is the largest buffer that some kernel binds whole (every buffer but the
	// embedding and the head, which are bound in vocabulary slices): it must fit
	// maxStorageBufferBindingSize.
	LargestBound     uint64
	LargestBoundName string
}

// BitsPerWeight is BLRBits / BLRWeights (0 without BLR projections).
func (p Plan) BitsPerWeight() float64 {
	if p.BLRWeights == 0 {
		return 0
	}
	return float64(p.BLRBits) / float64(p.BLRWeights)
}

// TotalBytes is WeightBytes + StateBytes + WorkBytes + TempBytes: an estimate of the phase's
// peak GPU bytes (the allocator's own overhead and the pipelines are not counted; a streamed
// teacher's next head block is allocated once the block before has released its temporaries,
// so where the head blocks are its weights' peak the sum can exceed the peak by one block).
func (p Plan) TotalBytes() uint64 {
	return p.WeightBytes + p.StateBytes + p.WorkBytes + p.TempBytes
}

// Check reports whether the plan fits a device with the given limits (bytes): the largest
// buffer within maxBuffer, the largest whole-bound buffer within maxBinding, and, when
// memory > 0, TotalBytes within memory. The error names the buffer and both sizes.
func (p Plan) Check(maxBuffer, maxBinding, memory uint64) error {
	if p.Largest > maxBuffer {
		return fmt.Errorf("%s needs %d bytes, above maxBufferSize %d", p.LargestName, p.Largest, maxBuffer)
	}
	if p.LargestBound > maxBinding {
		return fmt.Errorf("%s needs %d bytes in one binding, above maxStorageBufferBindingSize %d", p.LargestBoundName, p.LargestBound, maxBinding)
	}
	if memory > 0 && p.TotalBytes() > memory {
		return fmt.Errorf("the phase needs about %d bytes of GPU memory, above %d", p.TotalBytes(), memory)
	}
	return nil
}

// studentProjections lists layer L's projections as a Student holds them (q_proj and
// in_proj_qkv whole): the MLP's, then the mixer's in checkpoint order.
func studentProjections(L arch.DecoderLayer) []arch.Tensor {
	ps := []arch.Tensor{L.MLP.GateProj, L.MLP.UpProj, L.MLP.DownProj}
	for _, t := range L.Tensors() {
		if t.Role == arch.Projection && !slices.ContainsFunc(ps[:3], func(m arch.Tensor) bool { return m.Name == t.Name }) {
			ps = append(ps, t)
		}
	}
	return ps
}

// layerVectors is the f32 values of layer L besides its projections: norm gains, conv,
// A_log, dt_bias; and how many of them a Student trains (the gains).
func layerVectors(L arch.DecoderLayer) (all, gains int64) {
	for _, t := range L.Tensors() {
		if t.Role == arch.Projection {
			continue
		}
		n := int64(1)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		all += n
		if t.Trainable {
			gains += n
		}
	}
	return all, gains
}

func f16Bytes(n int64) uint64 { return uint64(2*n+3) &^ 3 }

// hasLayers reports whether c has a full-attention layer (full) or a GatedDeltaNet layer.
func hasLayers(c arch.Config, full bool) bool {
	for i := range c.LayerTypes {
		if c.IsFullAttention(i) == full {
			return true
		}
	}
	return false
}

// Memory computes the plan of a benchmark phase for architecture c: kind Teacher
// (a teacher pass, streamed or resident, top-k k) or Student (a step against a top-k of k),
// over nb windows of t tokens. It allocates nothing, so geometries too large for this
// machine can be checked here (Check) before a GPU run. Errors: an invalid config, nb, t or
// k < 1, streamed with a Student, or rows·width beyond the 2³¹ index range of a buffer.
func Memory(c arch.Config, kind nvgkit.NetKind, nb, t, k int, streamed bool) (Plan, error) {
	return memory(c, kind, 0, nb, t, k, streamed)
}

// TeacherMemory is Memory's plan of a teacher pass whose decoder projections are 8-bit in
// format (NewTeacher: codes and scales, quantBytes), or f16 planes for format 0. Errors as
// Memory's, and an unknown format.
func TeacherMemory(c arch.Config, format gpu.QuantFormat, nb, t, k int, streamed bool) (Plan, error) {
	if format != 0 && format != gpu.QuantFP8 && format != gpu.QuantQ8 {
		return Plan{}, fmt.Errorf("bench.TeacherMemory: unknown format %v", format)
	}
	return memory(c, nvgkit.Teacher, format, nb, t, k, streamed)
}

func memory(c arch.Config, kind nvgkit.NetKind, format gpu.QuantFormat, nb, t, k int, streamed bool) (Plan, error) {
	if err := c.Validate(); err != nil {
		return Plan{}, fmt.Errorf("bench.Memory: %w", err)
	}
	if nb < 1 || t < 1 || k < 1 {
		return Plan{}, fmt.Errorf("bench.Memory: nb = %d, t = %d, k = %d must be ≥ 1", nb, t, k)
	}
	if kind == nvgkit.Student && streamed {
		return Plan{}, fmt.Errorf("bench.Memory: a Student is never streamed")
	}
	var p Plan
	H, V := int64(c.HiddenSize), int64(c.VocabSize)
	rows := uint64(nb) * uint64(t)
	big := func(name string, b uint64, bound bool) {
		if b > p.Largest {
			p.Largest, p.LargestName = b, name
		}
		if bound && b > p.LargestBound {
			p.LargestBound, p.LargestBoundName = b, name
		}
	}
	l := c.Layout()
	emb := f16Bytes(V * H)
	shared := uint64(4 * H)
	p.Params = V*H + H
	if !streamed { // a streamed net keeps the embedding and the head on the host
		shared += emb
		big(l.EmbedTokens.Name, emb, false)
		if l.LMHead != nil {
			shared += emb
			big(l.LMHead.Name, emb, false)
		}
	}
	if l.LMHead != nil {
		p.Params += V * H
	}
	// The head's logits slice: the largest multiple of 128 vocabulary rows within 64 MiB.
	slice := min(uint64(V), max(128, (64<<20)/(4*rows)/128*128))
	p.Trainables = H
	var layers []uint64
	var maxTemp uint64
	for i, L := range l.Layers {
		all, gains := layerVectors(L)
		p.Params += all
		p.Trainables += gains
		lb := uint64(4 * all)
		var temp uint64
		// BLRBackward's borrowed intermediates, by byte size: the most of one size a call
		// holds at once (calls of one submit share them, Recorder.Borrow).
		borrowed := map[uint64]uint64{}
		for _, s := range studentProjections(L) {
			m, n := int64(s.Shape[0]), int64(s.Shape[1])
			// The projection's name within its layer, e.g. "mlp.gate_proj".
			name := strings.TrimSuffix(strings.TrimPrefix(s.Name, arch.LayerPrefix(i)), ".weight")
			p.Params += m * n
			if kind == nvgkit.Student && s.BLR && IsBLR(s.Shape[0], s.Shape[1]) {
				r := int64(Rank(s.Shape[0], s.Shape[1], 1, Paths))
				P := int64(Paths)
				p.BLRWeights += m * n
				p.BLRBits += 8 * (16 + P*(2*(m+n+r)+m*r/8+r*n/8))
				p.SignBits += P * (m*r + r*n)
				p.Trainables += P * (m + n + r)
				lb += uint64(P) * (4*uint64(m+n+r) + 4*uint64((m*r/8+3)/4) + 4*uint64((r*n/8+3)/4))
				big(fmt.Sprintf("layer %d %s sign bits", i, name), 4*uint64((max(m*r, r*n)/8+3)/4), true)
				// The recompute keeps t1 and c of every projection it runs (all but down_proj,
				// whose input is the last activation it makes); BLRBackward borrows dt2 and dxg,
				// and c and t1 where none are kept.
				widths := []int64{r, n, m, r}
				if s.Name != L.MLP.DownProj.Name {
					temp += 4 * rows * uint64((r+m)*P)
					widths = widths[:2]
				}
				held := map[uint64]uint64{}
				for _, w := range widths {
					held[4*rows*uint64(w)]++
				}
				for size, k := range held {
					borrowed[size] = max(borrowed[size], k)
				}
				continue
			}
			if kind == nvgkit.Student {
				p.DenseWeights += m * n
			}
			w, bound := f16Bytes(m*n), f16Bytes(m*n)
			if kind == nvgkit.Teacher && format != 0 { // codes (bound whole) and scales
				w, bound = quantBytes(format, m, n, streamed), 4*uint64((m*n+3)/4)
			}
			big(fmt.Sprintf("layer %d %s", i, name), bound, true)
			lb += w
		}
		for size, k := range borrowed {
			temp += size * k
		}
		maxTemp = max(maxTemp, temp)
		layers = append(layers, lb)
	}
	p.WeightBytes = shared
	if streamed {
		var a, b uint64
		for _, l := range layers {
			if l > a {
				a, b = l, a
			} else if l > b {
				b = l
			}
		}
		// The head in blocks of whole slices within half the two layers (and 1 GiB, the
		// staging slot's cap), two on the GPU at once.
		blk := nvgkit.HeadBlockRows(int(V), int(H), int(slice), min((a+b)/2, 1<<30))
		p.HeadBlockRows = blk
		blocks := f16Bytes(int64(blk)*H) + f16Bytes(min(int64(blk), V-int64(blk))*H)
		head := l.EmbedTokens.Name
		if l.LMHead != nil {
			head = l.LMHead.Name
		}
		big(fmt.Sprintf("%s block [%d×%d] f16", head, blk, H), f16Bytes(int64(blk)*H), false)
		p.WeightBytes += max(a+b, blocks)
		p.UploadBytes = emb
		for _, l := range layers {
			p.UploadBytes += l
		}
	} else {
		for _, l := range layers {
			p.WeightBytes += l
		}
	}
	// Work buffers, each [rows, width] f32 and bound whole.
	var widths []struct {
		name string
		w    int
	}
	add := func(name string, w int) {
		widths = append(widths, struct {
			name string
			w    int
		}{name, w})
	}
	I := c.IntermediateSize
	QK, VV := c.LinearNumKeyHeads*c.LinearKeyHeadDim, c.LinearNumValueHeads*c.LinearValueHeadDim
	Q := c.NumAttentionHeads * c.HeadDim
	if kind == nvgkit.Student {
		p.WorkBytes = nvgkit.StudentWorkBytes(c, nb, t)
		p.StateBytes = 16*uint64(p.Trainables) + 4
		add("work.gate", I)
		if hasLayers(c, false) {
			add("work.dMixed", 2*QK+VV)
		}
		if hasLayers(c, true) {
			add("work.dQG", 2*Q)
		}
	} else {
		p.WorkBytes = nvgkit.TeacherWorkBytes(c, nb, t)
		add("work.gate", I)
		if hasLayers(c, false) {
			add("work.mixed", 2*QK+VV)
		}
		if hasLayers(c, true) {
			add("work.qg", 2*Q)
		}
	}
	for _, w := range widths {
		if rows*uint64(w.w) > 1<<31-1 {
			return Plan{}, fmt.Errorf("bench.Memory: %s needs %d×%d elements, beyond the 2³¹ index range", w.name, rows, w.w)
		}
		big(fmt.Sprintf("%s [%d×%d] f32", w.name, rows, w.w), 4*rows*uint64(w.w), true)
	}
	p.WorkBytes += 8 * rows * uint64(k)
	headTemp := 4*rows*slice + 8*rows
	if kind == nvgkit.Student {
		headTemp += 4 * rows * uint64(H) // KLLossBackward's dh slice
	}
	big("head logits slice", 4*rows*slice, true)
	p.TempBytes = max(maxTemp, headTemp)
	return p, nil
}
