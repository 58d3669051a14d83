package train

import "syscall"

// hostMemory returns the machine's physical memory in bytes (sysinfo(2)), 0 when unknown.
func hostMemory() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}
