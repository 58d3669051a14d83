package gpu

// SetTargetLogitsSliceRows forces TargetLogits to read E in slices of n rows (a multiple of
// 128; 0 restores the automatic choice) and returns a function restoring the old value.
func SetTargetLogitsSliceRows(n int) (restore func()) {
	old := targetLogitsSliceRows
	targetLogitsSliceRows = n
	return func() { targetLogitsSliceRows = old }
}
