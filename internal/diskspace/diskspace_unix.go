//go:build unix

package diskspace

import (
	"math"

	"golang.org/x/sys/unix"
)

func available(dir string) (int64, bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	b := uint64(st.Bavail) * uint64(st.Bsize)
	if b > math.MaxInt64 {
		b = math.MaxInt64
	}
	return int64(b), true, nil
}
