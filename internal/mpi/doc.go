// Package mpi is nvg's thin binding to an MPI library (Open MPI through cgo) for
// data-parallel training (docs/DESIGN.md "Data parallelism"). It is compiled against MPI
// only with the build tag mpi (`go build -tags mpi ./cmd/nvg`, which needs libopenmpi-dev and
// pkg-config); without it every function is a single-process stub (Size 1, Rank 0), so the
// default build needs no MPI.
//
// Every collective is called by all ranks in the same order; they operate on
// MPI_COMM_WORLD. SumFloat32 and SumFloat64 are deterministic: every rank's buffer is
// gathered and the sum is taken in rank order on every rank (0 + b₀ + b₁ + … in f32 or f64),
// so the result is the same on every rank and never depends on message timing or on the
// reduction algorithm MPI picks.
package mpi

import (
	"fmt"
	"os"
	"strconv"
)

// LaunchedSize returns the number of ranks the environment says this process was started
// with (OMPI_COMM_WORLD_SIZE from Open MPI's mpirun, else PMI_SIZE from a PMI launcher such
// as srun or MPICH's mpiexec), and 1 when neither is set or parses as a positive integer.
func LaunchedSize() int {
	for _, k := range []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"} {
		if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
			return n
		}
	}
	return 1
}

// LocalRank returns this process's rank among the ranks on its own host
// (OMPI_COMM_WORLD_LOCAL_RANK, else MPI_LOCALRANKID, else PMI_LOCAL_RANK), 0 when none is
// set: the GPU a rank takes on a multi-GPU host.
func LocalRank() int {
	for _, k := range []string{"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"} {
		if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n >= 0 {
			return n
		}
	}
	return 0
}

// ErrNoMPI is returned by Init when this binary was built without the mpi tag but the
// environment says it was launched as one of several ranks (LaunchedSize > 1).
var ErrNoMPI = fmt.Errorf("this nvg was built without MPI: go build -tags mpi ./cmd/nvg")

// sumInOrder sets out to the sum of the len(out)-element parts of all (rank-major, ranks
// parts) taken in rank order: 0 + p₀ + p₁ + ….
func sumInOrder[T float32 | float64](out, all []T, ranks int) {
	n := len(out)
	clear(out)
	for r := range ranks {
		for i, v := range all[r*n : (r+1)*n] {
			out[i] += v
		}
	}
}

// World is MPI_COMM_WORLD as a value with methods (train.Comm): each method calls the
// package function of the same name.
type World struct{}

// Rank returns Rank().
func (World) Rank() int { return Rank() }

// Size returns Size().
func (World) Size() int { return Size() }

// SumFloat32 calls SumFloat32.
func (World) SumFloat32(buf []float32) error { return SumFloat32(buf) }

// SumFloat64 calls SumFloat64.
func (World) SumFloat64(buf []float64) error { return SumFloat64(buf) }

// Bcast calls Bcast.
func (World) Bcast(buf []byte, root int) error { return Bcast(buf, root) }

// Barrier calls Barrier.
func (World) Barrier() error { return Barrier() }
