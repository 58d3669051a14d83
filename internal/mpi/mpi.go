//go:build mpi

package mpi

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <stdlib.h>

static int nvg_mpi_init(void) {
	int done = 0;
	MPI_Initialized(&done);
	if (done) return MPI_SUCCESS;
	int provided;
	return MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
}
static int nvg_mpi_finalize(void) {
	int done = 0;
	MPI_Finalized(&done);
	if (done) return MPI_SUCCESS;
	return MPI_Finalize();
}
static int nvg_rank(int *r) { return MPI_Comm_rank(MPI_COMM_WORLD, r); }
static int nvg_size(int *s) { return MPI_Comm_size(MPI_COMM_WORLD, s); }
static int nvg_barrier(void) { return MPI_Barrier(MPI_COMM_WORLD); }
static int nvg_bcast(void *buf, int n, int root) { return MPI_Bcast(buf, n, MPI_BYTE, root, MPI_COMM_WORLD); }
static int nvg_allgather(const void *in, void *out, int n) {
	return MPI_Allgather(in, n, MPI_BYTE, out, n, MPI_BYTE, MPI_COMM_WORLD);
}
static void nvg_errstr(int code, char *buf, int cap) {
	int len = 0;
	MPI_Error_string(code, buf, &len);
	if (len >= cap) len = cap - 1;
	buf[len] = 0;
}
static int nvg_errors_return(void) { return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); }
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Enabled reports whether this binary was built with MPI (the mpi build tag).
const Enabled = true

var rank, size = 0, 1

func check(op string, code C.int) error {
	if code == C.MPI_SUCCESS {
		return nil
	}
	buf := make([]C.char, 512)
	C.nvg_errstr(code, &buf[0], 512)
	return fmt.Errorf("mpi: %s: %s (code %d)", op, C.GoString(&buf[0]), int(code))
}

// Init starts MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: only the calling OS thread, which
// it locks, may call MPI afterwards) and makes MPI errors return instead of aborting. It is
// a no-op when MPI was already initialised. Call it before any other function.
func Init() error {
	runtime.LockOSThread()
	if err := check("MPI_Init_thread", C.nvg_mpi_init()); err != nil {
		return err
	}
	if err := check("MPI_Comm_set_errhandler", C.nvg_errors_return()); err != nil {
		return err
	}
	var r, s C.int
	if err := check("MPI_Comm_rank", C.nvg_rank(&r)); err != nil {
		return err
	}
	if err := check("MPI_Comm_size", C.nvg_size(&s)); err != nil {
		return err
	}
	rank, size = int(r), int(s)
	return nil
}

// Finalize ends MPI (MPI_Finalize; a no-op when already finalised).
func Finalize() error { return check("MPI_Finalize", C.nvg_mpi_finalize()) }

// Rank returns this process's rank in MPI_COMM_WORLD (0 before Init).
func Rank() int { return rank }

// Size returns the number of ranks in MPI_COMM_WORLD (1 before Init).
func Size() int { return size }

// Barrier waits until every rank has called it (MPI_Barrier).
func Barrier() error { return check("MPI_Barrier", C.nvg_barrier()) }

// Bcast copies root's buf into every rank's buf (MPI_Bcast of bytes; same length on every
// rank, at most 2³¹−1 bytes). Errors: a bad root or length, or MPI's error.
func Bcast(buf []byte, root int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("mpi: Bcast: root %d outside 0…%d", root, size-1)
	}
	if len(buf) == 0 {
		return nil
	}
	if len(buf) > math.MaxInt32 {
		return fmt.Errorf("mpi: Bcast: %d bytes, more than 2³¹−1", len(buf))
	}
	return check("MPI_Bcast", C.nvg_bcast(unsafe.Pointer(&buf[0]), C.int(len(buf)), C.int(root)))
}

// allgather gathers n bytes at in from every rank into out (size·n bytes, rank-major).
func allgather(in, out unsafe.Pointer, n int) error {
	if n > math.MaxInt32 {
		return fmt.Errorf("mpi: allgather of %d bytes per rank, more than 2³¹−1 (split the buffer)", n)
	}
	return check("MPI_Allgather", C.nvg_allgather(in, out, C.int(n)))
}

// chunk bounds one allgather's bytes per rank (so size·chunk stays well inside an int).
const chunk = 1 << 26

// SumFloat32 replaces buf (same length on every rank) by the sum over ranks: every rank's
// buf is gathered (MPI_Allgather, in chunks of 64 MiB per rank) and summed in rank order
// (0 + b₀ + b₁ + …, f32) on every rank, so the result is identical on every rank and
// independent of timing. Errors: MPI's (a length that differs between ranks is undefined
// behaviour in MPI: callers pass buffers of one layout).
func SumFloat32(buf []float32) error { return sumOver(buf, 4) }

// SumFloat64 is SumFloat32 for float64 values (chunks of 64 MiB per rank).
func SumFloat64(buf []float64) error { return sumOver(buf, 8) }

// sumOver is SumFloat32 and SumFloat64 for elements of elem bytes.
func sumOver[T float32 | float64](buf []T, elem int) error {
	if size == 1 || len(buf) == 0 {
		return nil
	}
	per := chunk / elem
	for lo := 0; lo < len(buf); lo += per {
		part := buf[lo:min(lo+per, len(buf))]
		all := make([]T, size*len(part))
		if err := allgather(unsafe.Pointer(&part[0]), unsafe.Pointer(&all[0]), elem*len(part)); err != nil {
			return err
		}
		sumInOrder(part, all, size)
	}
	return nil
}
