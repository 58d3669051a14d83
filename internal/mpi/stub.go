//go:build !mpi

package mpi

// Enabled reports whether this binary was built with MPI (the mpi build tag).
const Enabled = false

// Init starts MPI; without the mpi build tag it does nothing, unless the environment says
// this process is one of several ranks (LaunchedSize > 1): then it returns ErrNoMPI, since
// every rank would otherwise train alone on the whole batch.
func Init() error {
	if LaunchedSize() > 1 {
		return ErrNoMPI
	}
	return nil
}

// Finalize ends MPI (a no-op without the mpi build tag).
func Finalize() error { return nil }

// Rank returns this process's rank in MPI_COMM_WORLD (0 without the mpi build tag).
func Rank() int { return 0 }

// Size returns the number of ranks in MPI_COMM_WORLD (1 without the mpi build tag).
func Size() int { return 1 }

// Barrier waits until every rank has called it (a no-op without the mpi build tag).
func Barrier() error { return nil }

// Bcast copies root's buf into every rank's buf (same length on every rank); a no-op
// without the mpi build tag.
func Bcast(buf []byte, root int) error { return nil }

// SumFloat32 replaces buf (same length on every rank) by the sum over ranks, taken in rank
// order on every rank; without the mpi build tag buf is left as it is.
func SumFloat32(buf []float32) error { return nil }

// SumFloat64 is SumFloat32 for float64 values.
func SumFloat64(buf []float64) error { return nil }
