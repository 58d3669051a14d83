package nvgkit

// SetMaxStagerSlot bounds the staging slots of streamed nets loaded afterwards to bytes (at
// least their largest parameter), so a layer goes in several uploads; restore puts the
// default back.
func SetMaxStagerSlot(bytes uint64) (restore func()) {
	old := maxStagerSlot
	maxStagerSlot = bytes
	return func() { maxStagerSlot = old }
}

// SetHeadBlocks sets the head's logits slice (rows, a multiple of 128; resident and streamed
// nets alike) and a streamed net's head block (rows, a multiple of the slice); 0 leaves a
// size automatic. restore puts the automatic sizes back.
func SetHeadBlocks(slice, block int) (restore func()) {
	s, b := headSliceRows, headBlockForce
	headSliceRows, headBlockForce = slice, block
	return func() { headSliceRows, headBlockForce = s, b }
}
