package gpu

import (
	"os"
	"strconv"

	"github.com/oliverbestmann/webgpu/wgpu"
)

// rankAdapter applies NVG_LOCAL_RANK (set by nvg for each rank of a data-parallel run: the
// rank among those on this host) to Open's default choice best: local rank r takes the
// (r mod n)-th of the n adapters of best's type, so the ranks of a multi-GPU host spread over
// its GPUs, and on a host with one adapter (Mesa lavapipe) all ranks share it. Without
// NVG_LOCAL_RANK, or with a value that is not an integer ≥ 0, best is returned.
func rankAdapter(infos []wgpu.AdapterInfo, best int) int {
	r, err := strconv.Atoi(os.Getenv("NVG_LOCAL_RANK"))
	if err != nil || r < 0 {
		return best
	}
	var same []int
	for i, in := range infos {
		if in.AdapterType == infos[best].AdapterType {
			same = append(same, i)
		}
	}
	return same[r%len(same)]
}
