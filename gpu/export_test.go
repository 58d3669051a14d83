package gpu

import "fmt"

// SetEmbeddingSliceRows forces Embedding to gather in slices of n table rows (a multiple of
// 128; 0 restores the automatic choice) and returns a function restoring the old value.
func SetEmbeddingSliceRows(n int) (restore func()) {
	return swap(&embeddingSliceRows, n)
}

// SetGEMMVariant forces the tiled GEMM's variant (linear.wgsl and blr_forward.wgsl): the
// block bm×bn×bk (bm, bn ∈ {64, 128}, bk ∈ {16, 32}; bm = 0 keeps the automatic tile),
// general = the bounds-checked path even where the fast one applies. It returns a function
// restoring the old choice.
func SetGEMMVariant(bm, bn, bk int, general bool) (restore func()) {
	return swap(&gemmForce, gemmVariant{BM: bm, BN: bn, BK: bk, General: general})
}

// SetFillRandomSliceWords forces FillRandomBits/FillRandomUniform to fill in slices of n
// words (a multiple of the storage alignment in words; 0 restores the automatic choice) and
// returns a function restoring the old value.
func SetFillRandomSliceWords(n int) (restore func()) {
	return swap(&fillRandomSliceWords, n)
}

// SetGDRCSlice caps the value columns per workgroup of GatedDeltaRuleChunked's tiled
// inter-chunk kernel (8, 16 or 32; 0 restores the automatic choice) and returns a function
// restoring the old value.
func SetGDRCSlice(cs int) (restore func()) {
	return swap(&gdrcCS, cs)
}

// SetSignGradNaive forces BLRSignGrad's simple kernel (on) or its blocked one (off) and
// returns a function restoring the old choice.
func SetSignGradNaive(on bool) (restore func()) {
	return swap(&signGradNaive, on)
}

// SetSignGradSplit forces the number of row ranges of BLRSignGrad's blocked kernel (at most
// one per 16 rows; 0: the automatic choice) and returns a function restoring the old one.
func SetSignGradSplit(splits int) (restore func()) {
	return swap(&signGradSplit, splits)
}

// SetGEMMLanes forces the lane-blocked GEMM kernels (gemm_lanes.go) wherever they apply,
// also on GPUs, and returns a function restoring the automatic choice (CPU adapters only).
func SetGEMMLanes(on bool) (restore func()) {
	return swap(&gemmLanesForce, on)
}

// SetRowLanes chooses the form of the row kernels on CPU adapters (their lanes form when on,
// the default; the workgroup form when off) and returns a function restoring the old choice.
func SetRowLanes(on bool) (restore func()) {
	return swap(&rowLanesOff, !on)
}

// SetRowGroupRows makes the row kernels' workgroup form take rw rows a workgroup on every row
// length (the automatic choice takes 4 on short rows, 1 on others); it returns a function
// restoring the automatic choice.
func SetRowGroupRows(rw int) (restore func()) {
	r1, r2 := swap(&rowGroupRows, rw), swap(&rowGroupRowsAll, true)
	return func() { r2(); r1() }
}

// SetPathPairs chooses how BLRForward and BLRBackward run a two-path layer on CPU adapters:
// both paths' t1 and dt2 GEMMs and column reductions in one pass each (on, the default) or
// one pass per path (off); it returns a function restoring the old choice.
func SetPathPairs(on bool) (restore func()) {
	return swap(&pathPairsOff, !on)
}

// SetCausalConvRuns forces the form of the causal convolution kernels: the run form (on, the
// default) or the per-element one (off, the simple twin); it returns a function restoring
// the old choice.
func SetCausalConvRuns(on bool) (restore func()) {
	return swap(&causalConvRunsOff, !on)
}

// GEMMLanesDispatches is the number of lane-blocked GEMMs recorded so far in this process.
func GEMMLanesDispatches() int { return gemmLanesDispatches }

// SetLogitsTopKLanes forces LogitsTopK's merge form: 1 the lane-blocked one (where the device
// has a probed subgroup size), −1 the workgroup one, 0 automatic; it returns a function
// restoring the old choice.
func SetLogitsTopKLanes(v int) (restore func()) {
	return swap(&topkLanesForce, v)
}

// SetLogitsTopKRounds makes LogitsTopK's workgroup merge always take its K rounds (on) or
// the rank merge where the candidates fit (off, the default) and returns a function restoring
// the old choice.
func SetLogitsTopKRounds(on bool) (restore func()) {
	return swap(&topkRounds, on)
}

// SetFreedAheadLimit sets the bytes of released buffers after which a submit waits for the
// GPU (freedAheadLimit) and returns a function restoring the old limit.
func SetFreedAheadLimit(bytes uint64) (restore func()) {
	return swap(&freedAheadLimit, bytes)
}

// FreedAhead returns the bytes released since the device last waited for the GPU.
func (d *Device) FreedAhead() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.freedAhead
}

// SetColDotForm makes the column reductions (gradColDot, gradColDot2) take one form where it
// applies: "windows" (CPU adapters' uniform views), "dot4" (n a multiple of 4, one path) or
// "dot" (always applies); "" restores the automatic choice. It returns a function restoring
// the old choice.
func SetColDotForm(form string) (restore func()) {
	switch form {
	case "", "windows", "dot4", "dot":
	default:
		panic(fmt.Sprintf("SetColDotForm: unknown form %q", form))
	}
	return swap(&colDotForced, form)
}

// ColDot4Dispatches is the number of stage "dot4" column reductions recorded so far in this
// process.
func ColDot4Dispatches() int { return colDot4Dispatches }

// CoopPackHeadsForm returns the vector form's 16-byte vectors a row (HP4) and an invocation
// (NV) that CoopmatPackHeads takes for rows of hd values packed to hp, stride apart from
// column col0 (0, 0: the general form).
func CoopPackHeadsForm(hd, hp, stride, col0 int) (hp4, nv int) {
	p := coopPackHeadsFor(hd, hp, stride, col0, false)
	return p.HP4, p.NV
}

// GradColDot is gradColDot, for tests.
func GradColDot(r *Recorder, a, b, rs, mask, s, out, so *Buffer, rows, n int, sideAccum bool) error {
	return gradColDot(r, "GradColDot", a, b, rs, mask, s, out, so, rows, n, sideAccum)
}

// GradColDot2 is gradColDot2, for tests.
func GradColDot2(r *Recorder, sharedA bool, a, b, c2, s0, s1, out0, out1, so *Buffer, rows, n int) error {
	return gradColDot2(r, "GradColDot2", sharedA, a, b, c2, s0, s1, out0, out1, so, rows, n)
}

// SetCoopmatTile forces the cooperative-matrix GEMMs' tile ("BMxBNxBK/WMxWN", as
// NVG_COOPMAT_TILE; "" restores the automatic choice), checked against d's shape and limits,
// and returns a function restoring the old tile.
func SetCoopmatTile(d *Device, s string) (restore func(), err error) {
	old := coopTileForce
	var t coopTile
	if s != "" {
		if t, err = parseCoopTile(s); err != nil {
			return nil, err
		}
		tc := d.TensorCores()
		if err = t.check(tc.Shape, tc.SubgroupSize, d.Info()); err != nil {
			return nil, err
		}
	}
	coopTileForce = t
	return func() { coopTileForce = old }, nil
}

// SetCoopmatSplitK forces the split-K factor S of the cooperative-matrix GEMMs (as
// NVG_COOPMAT_SPLITK; 0 restores the automatic choice) and returns a function restoring the
// old one.
func SetCoopmatSplitK(s int) (restore func()) {
	return swap(&coopSplitForce, s)
}

// SetCoopQuantBlockGroups sets the least grid for the 8-bit GEMM's own block (0: wherever it
// fits) and returns a function restoring the old one.
func SetCoopQuantBlockGroups(n int) (restore func()) {
	return swap(&coopQuantBlockGroups, n)
}

// CoopQuantBlockShared is the workgroup memory of the 8-bit GEMM's own block on d, in bytes.
func CoopQuantBlockShared(d *Device) int {
	return coopQuantBlock.shared(d.TensorCores().Shape) + 8*coopQuantBlock.BN // as coopTile.fits
}

// CoopSplits counts the split-K cooperative-matrix GEMMs recorded.
func CoopSplits() int { return int(coopSplitKs.Load()) }

// CoopDispatches counts the cooperative-matrix GEMMs recorded (tests check a forced path ran).
func CoopDispatches() int { return int(coopDispatches.Load()) }

// CoopTwinPacks returns how many twin packs (both paths' A operands in one pass) have been
// recorded.
func CoopTwinPacks() int { return int(coopTwinPacks.Load()) }

// CoopPairGEMMs returns how many pair dispatches (both BLR paths' t1 or dt2 GEMMs in one
// cooperative-matrix dispatch, coopBLRGEMMPair) have been recorded.
func CoopPairGEMMs() int { return int(coopPairGEMMs.Load()) }

// CoopDualGEMMs returns how many DUAL dispatches (both BLR paths' y GEMMs of a forward in one
// cooperative-matrix dispatch, coopBLRGEMMDual) have been recorded.
func CoopDualGEMMs() int { return int(coopDualGEMMs.Load()) }

// SetCoopGPUTiles makes CPU adapters take the GPUs' tiles for the cooperative-matrix
// attention and delta-rule kernels (on) or their own (off), and returns a function restoring
// the old choice.
func SetCoopGPUTiles(on bool) (restore func()) {
	return swap(&coopGPUTiles, on)
}

// SetGDRCUnroll forces the chunked delta rule's intra-chunk substitution unrolled (on) or as
// a loop (off) on every adapter (gdrcUnroll); it returns the restore function.
func SetGDRCUnroll(on bool) func() {
	old := gdrcUnroll
	gdrcUnroll = -1
	if on {
		gdrcUnroll = 1
	}
	return func() { gdrcUnroll = old }
}

// swap sets *p to v and returns a function restoring the old value (the test hooks above).
func swap[T any](p *T, v T) (restore func()) {
	old := *p
	*p = v
	return func() { *p = old }
}

// SetCoopPackHeadsGeneral makes the cooperative-matrix head packs (CoopmatPackHeads) take
// their general form (on) or the automatic choice (off); it returns a function restoring
// the old choice.
func SetCoopPackHeadsGeneral(on bool) (restore func()) {
	return swap(&coopPackHeadsGeneral, on)
}

// CoopPackHeads runs coopPackHeads' kernel on x [nb·t, heads, stride] (token-major; with
// headMajor [nb·heads·t, stride]) for tests: the n values from column col0 of each row packed
// to np; it returns the packed words and scales.
func CoopPackHeads(d *Device, x *Buffer, nb, t, heads, n, np, stride, col0 int, headMajor bool) (x16 []uint32, scale []float32, err error) {
	nblk := (t + coopPackRows - 1) / coopPackRows
	xb, err := d.NewBuffer("x16", U32, nb*heads*nblk*coopPackRows*np/2)
	if err != nil {
		return nil, nil, err
	}
	defer xb.Release()
	sb, err := d.NewBuffer("scale", F32, nb*heads*nblk)
	if err != nil {
		return nil, nil, err
	}
	defer sb.Release()
	s := coopPackSpec{b: x, heads: heads, n: n, np: np, headMajor: headMajor, stride: stride, col0: col0}
	if err := d.Run(func(r *Recorder) error { return coopPackHeadsInto(r, "CoopPackHeads", nb, t, s, xb, sb) }); err != nil {
		return nil, nil, err
	}
	if x16, err = d.ReadUint32(xb); err != nil {
		return nil, nil, err
	}
	scale, err = d.ReadFloat32(sb)
	return x16, scale, err
}

// BackwardViaSaved returns a launcher with GatedDeltaRuleChunkedBackward's arguments that
// records the chunked forward saving what its backward needs (SaveChunkedForTest), then the
// chunked backward of the same form reading it (BackwardFromSavedForTest); a failing call
// leaves nothing recorded.
func BackwardViaSaved(coop bool) func(r *Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
	return func(r *Recorder, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims) error {
		if err := dims.check(r, "BackwardViaSaved"); err != nil {
			return err
		}
		fail := r.rollback()
		o, err := r.Temp("o", F32, dims.NB*dims.T, dims.HV, dims.DV)
		if err != nil {
			return err
		}
		s, err := saveChunked(r, q, k, v, g, beta, o, dims, coop)
		if err == nil {
			err = BackwardFromSavedForTest(r, s, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims, coop)
		}
		if err != nil {
			return fail(err)
		}
		return nil
	}
}

// SaveChunkedForTest records the chunked forward that saves, of the cooperative-matrix form
// (GatedDeltaRuleAutoSave's) with coop, else of the WGSL one (which production never saves:
// it serves the tests of the backward's WGSL fallback reading a saved forward), whatever the
// automatic choice on r's device.
func SaveChunkedForTest(r *Recorder, q, k, v, g, beta, o *Buffer, dims DeltaRuleDims, coop bool) (*DeltaRuleSaved, error) {
	return saveChunked(r, q, k, v, g, beta, o, dims, coop)
}

// BackwardFromSavedForTest records the chunked backward reading s (of the
// cooperative-matrix form with coop), whatever the automatic choice on r's device.
func BackwardFromSavedForTest(r *Recorder, s *DeltaRuleSaved, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta *Buffer, dims DeltaRuleDims, coop bool) error {
	if err := s.check("BackwardFromSavedForTest", r, q, k, v, g, beta, dims); err != nil {
		return err
	}
	if coop {
		return chunkedBackwardCoopmat(r, q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims, s)
	}
	return gatedDeltaRuleChunkedBackward(r, "GatedDeltaRuleChunkedBackward", q, k, v, g, beta, do, dq, dkey, dval, dg, dbeta, dims, false, s)
}

// SetColReduceBatch makes BLRBackward run its column reductions' second stages as one
// dispatch at its end (on, the default) or one dispatch per reduction (off, the simple twin);
// it returns a function restoring the old choice.
func SetColReduceBatch(on bool) (restore func()) {
	return swap(&colReduceBatchOff, !on)
}

// MaxStorageBuffersPerStage is d's storage bindings per shader stage (what colReduces.flush
// packs its segments under).
func MaxStorageBuffersPerStage(d *Device) int { return int(d.limits.MaxStorageBuffersPerShaderStage) }

// SetColReduceLimit caps the storage bindings of one batched second-stage dispatch of the
// column reductions (colReduces.flush; 0: the device's limit) and returns a function
// restoring the old cap.
func SetColReduceLimit(n int) (restore func()) {
	return swap(&colReduceLimit, n)
}

// SetCoopDeltaWide makes the delta rule's cooperative-matrix kernels start from 4·L value
// columns a workgroup, halved until the workgroup memory fits (on, coopDeltaWide), instead of
// the device's choice, and returns a function restoring the old choice.
func SetCoopDeltaWide(on bool) (restore func()) {
	return swap(&coopDeltaWide, on)
}

// LogitsTopKLanesSize is the subgroup size LogitsTopK's lane-blocked merge runs on when
// forced (SetLogitsTopKLanes(1)): a CPU adapter's or a GPU's probed one; 0: none.
func LogitsTopKLanesSize(d *Device) int { return d.topkLanesSize() }

// Coop2Dispatches counts the coopmat2 GEMMs recorded (tests check that the forced path ran).
func Coop2Dispatches() int64 { return coop2Dispatches.Load() }

// SetCoopmat2Tile forces the coopmat2 GEMM's block ("BMxBNxBK/NT", checked against d; ""
// restores the automatic choice) and returns the function restoring the previous one.
func SetCoopmat2Tile(d *Device, s string) (restore func(), err error) {
	old := coop2TileForce
	t := coop2Tile{}
	if s != "" {
		if t, err = parseCoop2Tile(s); err != nil {
			return nil, err
		}
		tc := d.TensorCores()
		if err := t.check(tc.FlexShapes, tc.Coopmat2Limits, d.Info()); err != nil {
			return nil, err
		}
	}
	coop2TileForce = t
	return func() { coop2TileForce = old }, nil
}
