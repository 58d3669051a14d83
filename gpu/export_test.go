package gpu

// SetEmbeddingSliceRows forces Embedding to gather in slices of n table rows (a multiple of
// 128; 0 restores the automatic choice) and returns a function restoring the old value.
func SetEmbeddingSliceRows(n int) (restore func()) {
	old := embeddingSliceRows
	embeddingSliceRows = n
	return func() { embeddingSliceRows = old }
}

// SetGEMMTile forces the tiled GEMM's block (bm, bn ∈ {64, 128}, bk ∈ {16, 32}; bm = 0
// restores the automatic choice) and returns a function restoring the old value.
func SetGEMMTile(bm, bn, bk int) (restore func()) {
	old := gemmTile
	gemmTile = gemmParams{BM: bm, BN: bn, BK: bk}
	return func() { gemmTile = old }
}

// SetGDRCSlice caps the value columns per workgroup of GatedDeltaRuleChunked's tiled
// inter-chunk kernel (8, 16 or 32; 0 restores the automatic choice) and returns a function
// restoring the old value.
func SetGDRCSlice(cs int) (restore func()) {
	old := gdrcCS
	gdrcCS = cs
	return func() { gdrcCS = old }
}
