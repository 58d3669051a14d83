//go:build !linux

package train

// hostMemory returns 0 (unknown) outside Linux: CheckMemory then checks nothing.
func hostMemory() uint64 { return 0 }
