package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nvg-project/nvg/internal/mpi"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// checkMPILaunch is run's check that a binary built without MPI was not started by mpirun
// as one of several ranks (each would train alone on the whole batch): it returns the
// message to print with exit status 2, or "".
func checkMPILaunch() string {
	if !mpi.Enabled && mpi.LaunchedSize() > 1 {
		return fmt.Sprintf("nvg: started as one of %d ranks, but %v", mpi.LaunchedSize(), mpi.ErrNoMPI)
	}
	return ""
}

// mpiRun is a command's place in a data-parallel run (docs/DESIGN.md "Data parallelism").
type mpiRun struct {
	comm train.Comm
	// finish ends MPI (call once, at the command's end).
	finish func()
}

// startMPI initialises MPI when this binary has it and the process was started by mpirun
// with more than one rank; it sets NVG_LOCAL_RANK (gpu.Open: one adapter per local rank)
// before any device is opened. A single process gets SingleProcess and no MPI at all.
func startMPI() (*mpiRun, error) {
	if !mpi.Enabled || mpi.LaunchedSize() == 1 {
		return &mpiRun{comm: train.SingleProcess{}, finish: func() {}}, nil
	}
	if err := mpi.Init(); err != nil {
		return nil, err
	}
	if os.Getenv("NVG_LOCAL_RANK") == "" {
		os.Setenv("NVG_LOCAL_RANK", strconv.Itoa(mpi.LocalRank()))
	}
	return &mpiRun{comm: mpi.World{}, finish: func() { mpi.Finalize() }}, nil
}

// rankDir is where rank r > 0 of a new run keeps what it writes before training (its own
// compressed student, settings and top-k shard): out.rank<r>, beside the run's directory
// out (inside it would race with rank 0's empty-directory check); rank 0 uses out.
func rankDir(out string, r int) string {
	if r == 0 {
		return out
	}
	return filepath.Clean(out) + fmt.Sprintf(".rank%d", r)
}

// bcastString returns rank 0's s on every rank (at most 4095 bytes).
func bcastString(c train.Comm, s string) (string, error) {
	if c.Size() == 1 {
		return s, nil
	}
	buf := make([]byte, 4096)
	if len(s) >= len(buf) {
		return "", fmt.Errorf("bcastString: %d bytes, at most %d", len(s), len(buf)-1)
	}
	copy(buf, s)
	if err := c.Bcast(buf, 0); err != nil {
		return "", err
	}
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	return string(buf[:n]), nil
}
