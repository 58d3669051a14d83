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

// SetGDRCVariant selects GatedDeltaRuleChunked's kernel variants (block: the blockwise
// intra-chunk solve; tiled: the tiled inter-chunk kernel; cs: the inter-chunk slice width, 0 automatic) and returns a function
// restoring the old choice.
func SetGDRCVariant(block, tiled bool, cs int) (restore func()) {
	old := gdrcVariant
	gdrcVariant.block, gdrcVariant.tiled, gdrcVariant.cs = block, tiled, cs
	return func() { gdrcVariant = old }
}

// SetGDRCRows sets the rows per invocation of GatedDeltaRuleChunked's W/U product (16 or 8)
// and returns a function restoring the old value.
func SetGDRCRows(rpt int) (restore func()) {
	old := gdrcVariant.rpt
	gdrcVariant.rpt = rpt
	return func() { gdrcVariant.rpt = old }
}
