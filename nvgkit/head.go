package nvgkit

import (
	"fmt"

	"github.com/nvg-project/nvg/gpu"
)

// The LM head of a Teacher: resident, one f16 buffer [vocab, H] (the embedding's when tied);
// streamed (StreamLayers), a host plane uploaded a block of vocabulary rows at a time through
// the net's stager during each pass (DESIGN.md §9 "What the bytes become").

// headSliceRows, when > 0, is the head's logits slice (gpu.LogitsDims.SliceRows) of resident
// and streamed nets alike, and headBlockForce, when > 0, a streamed net's head block in rows
// (a multiple of the slice): tests (SetHeadBlocks). 0: the automatic sizes.
var headSliceRows, headBlockForce int

// HeadBlockRows is how many vocabulary rows of its head a streamed net uploads at a time: the
// largest multiple of slice (the head's logits slice for the pass's rows,
// gpu.Device.LogitsSliceRows) whose f16 bytes (2·hidden per row) are within limit, but at
// least one slice and at most vocab. A streamed net's limit is half the bytes of its two
// largest decoder layers (the two blocks on the GPU at once then hold no more than the two
// layers did), capped at the staging slot's 1 GiB. A vocabulary that is no multiple of the
// block leaves a smaller last block. 0 when any argument is < 1.
func HeadBlockRows(vocab, hidden, slice int, limit uint64) int {
	if vocab < 1 || hidden < 1 || slice < 1 {
		return 0
	}
	b := int(limit/(2*uint64(hidden))) / slice * slice
	return min(max(b, slice), vocab)
}

// headDims is the top-k head's sizes on w for k.
func (n *Net) headDims(w *Work, k int) gpu.LogitsDims {
	c := n.Config
	return gpu.LogitsDims{Rows: w.NB * w.T, Hidden: c.HiddenSize, Vocab: c.VocabSize, K: k, SliceRows: headSliceRows}
}

// headBlock is a streamed net's head block in rows for dims (HeadBlockRows with the net's
// limit).
func (n *Net) headBlock(dims gpu.LogitsDims) (int, error) {
	s, err := n.dev.LogitsSliceRows(dims, gpu.F16)
	if err != nil {
		return 0, err
	}
	if headBlockForce > 0 {
		return min(headBlockForce, dims.Vocab), nil
	}
	return HeadBlockRows(dims.Vocab, dims.Hidden, s, min(n.layerPair()/2, maxStagerSlot)), nil
}

// layerPair is the bytes of the net's two largest decoder layers (the one layer's with one).
func (n *Net) layerPair() uint64 {
	var a, b uint64
	for _, l := range n.layers {
		if x := l.bytes(); x > a {
			a, b = x, a
		} else if x > b {
			b = x
		}
	}
	return a + b
}

// runHead records the final norm of w.x into w.xn and the top-k head on it (the log-sum-exp
// into w.headLSE, the k ids and log-probabilities into idsB and logpB: Work.topBuffers),
// then after (when not nil), and submits. A resident net records it all in one submit. A
// streamed net uploads its head a block at a time (headBlock rows, the last block ragged)
// and records one gpu.LogitsTopKPart per block, each in its own submit (after in the last):
// block b+1 goes up while block b computes, and block b is released once block b+1 is up,
// so two blocks at most are on the GPU. Both give the same bits (LogitsTopKPart runs
// LogitsTopK's slices).
func (n *Net) runHead(w *Work, k int, idsB, logpB *gpu.Buffer, after func(r *gpu.Recorder) error) error {
	dims := n.headDims(w, k)
	if !n.streamed {
		return n.dev.Run(func(r *gpu.Recorder) error {
			if err := n.recordFinalNorm(r, w); err != nil {
				return err
			}
			if err := gpu.LogitsTopK(r, w.xn, n.head, dims, w.headLSE, idsB, logpB); err != nil {
				return err
			}
			if after != nil {
				return after(r)
			}
			return nil
		})
	}
	B, err := n.headBlock(dims)
	if err != nil {
		return err
	}
	state, err := n.dev.NewBuffer("head state (running max, Σ exp)", gpu.F32, dims.Rows, 2)
	if err != nil {
		return err
	}
	defer state.Release()
	V := dims.Vocab
	blk, err := n.uploadHeadRows(0, min(B, V))
	if err != nil {
		return err
	}
	defer func() { blk.Release() }() // the block in use when a step fails (nil-safe)
	for v0 := 0; v0 < V; v0 += B {
		rows := min(B, V-v0)
		err := n.dev.Run(func(r *gpu.Recorder) error {
			if v0 == 0 {
				if err := n.recordFinalNorm(r, w); err != nil {
					return err
				}
			}
			part := gpu.LogitsPart{V0: v0, Rows: rows, State: state}
			if err := gpu.LogitsTopKPart(r, w.xn, blk, dims, part, w.headLSE, idsB, logpB); err != nil {
				return err
			}
			if after != nil && v0+rows == V {
				return after(r)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("head rows [%d, %d): %w", v0, v0+rows, err)
		}
		var next *gpu.Buffer
		if v0+rows < V {
			if next, err = n.uploadHeadRows(v0+rows, min(B, V-v0-rows)); err != nil {
				return err
			}
		}
		blk.Release() // the submitted work keeps it alive until it completes
		blk = next
	}
	return nil
}

// uploadHeadRows allocates an F16 [rows, H] buffer and fills it with the head's rows [v0,
// v0+rows) from its host plane through the net's stager (counted in UploadedBytes).
func (n *Net) uploadHeadRows(v0, rows int) (*gpu.Buffer, error) {
	H := n.Config.HiddenSize
	b, err := n.dev.NewBuffer(fmt.Sprintf("%s rows [%d, %d)", n.headName(), v0, v0+rows), gpu.F16, rows, H)
	if err != nil {
		return nil, memRemedy(err)
	}
	if err := n.ensureStager(b.Bytes()); err != nil {
		b.Release()
		return nil, err
	}
	if err := n.stager.Upload([]gpu.StagerUpload{{Dst: b, F16: n.headHost[v0*H : (v0+rows)*H]}}); err != nil {
		b.Release()
		return nil, err
	}
	n.uploaded += b.Bytes()
	return b, nil
}

// headName is the head's tensor name (the embedding's when tied).
func (n *Net) headName() string {
	l := n.Config.Layout()
	if l.LMHead != nil {
		return l.LMHead.Name
	}
	return l.EmbedTokens.Name
}

// targetLogits records out[i] = xn[i]·head[ids[i]] (gpu.TargetLogits; len(ids) rows of xn).
// A streamed net gathers the ids' rows of its host plane and uploads them ([len(ids), H]
// f16, ordered before r's submit), and the kernel reads row i for id i: the same products
// in the same order, so the same bits. release frees that upload; call it after r's submit.
func (n *Net) targetLogits(r *gpu.Recorder, xn *gpu.Buffer, ids []int, out *gpu.Buffer) (release func(), err error) {
	if !n.streamed {
		return func() {}, gpu.TargetLogits(r, xn, n.head, ids, out)
	}
	H, V := n.Config.HiddenSize, n.Config.VocabSize
	rows := make([]uint16, len(ids)*H)
	iota := make([]int, len(ids))
	for i, id := range ids {
		if id < 0 || id >= V {
			return func() {}, fmt.Errorf("target %d is %d, outside the vocabulary [0, %d)", i, id, V)
		}
		copy(rows[i*H:(i+1)*H], n.headHost[id*H:(id+1)*H])
		iota[i] = i
	}
	g, err := n.dev.UploadF16(n.headName()+" rows of the targets", rows, len(ids), H)
	if err != nil {
		return func() {}, memRemedy(err)
	}
	if err := gpu.TargetLogits(r, xn, g, iota, out); err != nil {
		g.Release()
		return func() {}, err
	}
	return g.Release, nil
}

// headRows returns the head's rows [v0, v0+cols) as LinearRows takes them: the resident
// head with row offset v0, or, for a streamed net, those rows uploaded ([cols, H] f16, the
// caller releases it) with offset 0. The product is the same, bit for bit.
func (n *Net) headRows(v0, cols int) (e *gpu.Buffer, o0, out int, owned bool, err error) {
	if !n.streamed {
		return n.head, v0, n.Config.VocabSize, false, nil
	}
	H := n.Config.HiddenSize
	b, err := n.dev.UploadF16(fmt.Sprintf("%s rows [%d, %d)", n.headName(), v0, v0+cols), n.headHost[v0*H:(v0+cols)*H], cols, H)
	if err != nil {
		return nil, 0, 0, false, memRemedy(err)
	}
	return b, 0, cols, true, nil
}
