package gpu

// SetEmbeddingSliceRows forces Embedding to gather in slices of n table rows (a multiple of
// 128; 0 restores the automatic choice) and returns a function restoring the old value.
func SetEmbeddingSliceRows(n int) (restore func()) {
	old := embeddingSliceRows
	embeddingSliceRows = n
	return func() { embeddingSliceRows = old }
}
