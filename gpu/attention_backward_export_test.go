package gpu

// SetAttentionBackwardWide selects AttentionBackward's 256- (true) or 64-invocation (false)
// workgroups for benchmarks and tests; it returns the previous setting.
func SetAttentionBackwardWide(wide bool) bool {
	old := attentionBackwardWide
	attentionBackwardWide = wide
	return old
}
