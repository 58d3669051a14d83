package nvgkit

// SetMaxStagerSlot bounds the staging slots of streamed nets loaded afterwards to bytes (at
// least their largest parameter), so a layer goes in several uploads; restore puts the
// default back.
func SetMaxStagerSlot(bytes uint64) (restore func()) {
	old := maxStagerSlot
	maxStagerSlot = bytes
	return func() { maxStagerSlot = old }
}
