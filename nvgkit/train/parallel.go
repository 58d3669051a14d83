package train

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/nvg-project/nvg/nvgkit"
)

// Comm is the collective-communication layer a data-parallel Trainer runs on
// (docs/DESIGN.md "Data parallelism"): Size ranks, each a process with its own GPU, each
// calling the same collectives in the same order. internal/mpi's World implements it over
// MPI; SingleProcess is the one-rank Comm.
type Comm interface {
	// Rank is this process's rank, 0 … Size−1; rank 0 evaluates, logs metrics and writes
	// checkpoints.
	Rank() int
	// Size is the number of ranks (≥ 1).
	Size() int
	// SumFloat32 replaces buf (the same length on every rank) by its sum over ranks, taken
	// in rank order (0 + b₀ + b₁ + …, f32) and identical on every rank.
	SumFloat32(buf []float32) error
	// SumFloat64 is SumFloat32 for float64 values.
	SumFloat64(buf []float64) error
	// Bcast copies root's buf into every rank's buf (the same length on every rank).
	Bcast(buf []byte, root int) error
	// Barrier returns when every rank has called it.
	Barrier() error
}

// SingleProcess is the Comm of one process alone (Size 1): every collective leaves its
// buffer as it is.
type SingleProcess struct{}

// Rank returns 0.
func (SingleProcess) Rank() int { return 0 }

// Size returns 1.
func (SingleProcess) Size() int { return 1 }

// SumFloat32 leaves buf as it is (the sum over one rank).
func (SingleProcess) SumFloat32([]float32) error { return nil }

// SumFloat64 leaves buf as it is.
func (SingleProcess) SumFloat64([]float64) error { return nil }

// Bcast leaves buf as it is.
func (SingleProcess) Bcast([]byte, int) error { return nil }

// Barrier returns at once.
func (SingleProcess) Barrier() error { return nil }

// Option configures a Trainer at NewTrainer, Resume or ResumeCheckpoint. Options are not
// part of the checkpoint: a run may resume with other options (another number of ranks)
// and keeps the same window schedule.
type Option func(*Trainer)

// WithComm makes the Trainer one rank of a data-parallel run over c: each step's NB windows
// are split into c.Size() contiguous shares (rank r takes windows r·NB/Size … of the step),
// each rank computes the teacher's top-k of its shares only, the gradients are summed over
// ranks (Comm.SumFloat32) before clipping and Adam, and rank 0 alone evaluates, writes
// metrics and checkpoints. NB must be a multiple of Size·MicroBatches.
func WithComm(c Comm) Option { return func(tr *Trainer) { tr.comm = c } }

// WithMicroBatches makes each rank run its share of a step's windows as m micro-batches of
// NB/(Size·m) windows each (smaller works: less GPU memory), every micro-batch's gradient
// read to the host and summed in order (gradient accumulation). One process with
// WithMicroBatches(R) follows the trajectory of R ranks bit for bit (DESIGN.md "Data
// parallelism"). m ≤ 1 means one batch per rank.
func WithMicroBatches(m int) Option { return func(tr *Trainer) { tr.micro = max(m, 1) } }

// applyOptions applies opts and checks the split of NB; it returns the windows per part.
func (tr *Trainer) applyOptions(opts []Option) (int, error) {
	tr.comm, tr.micro = SingleProcess{}, 1
	for _, o := range opts {
		o(tr)
	}
	if tr.comm == nil {
		tr.comm = SingleProcess{}
	}
	R, m, nb := tr.comm.Size(), tr.micro, tr.Config.NB
	if R < 1 {
		return 0, fmt.Errorf("train.NewTrainer: a Comm of %d ranks", R)
	}
	if nb%(R*m) != 0 {
		return 0, fmt.Errorf("train.NewTrainer: NB = %d windows per step cannot be split evenly over %d ranks × %d micro-batches (make NB a multiple of %d)", nb, R, m, R*m)
	}
	return nb / (R * m), nil
}

// parts is the number of parts a step's windows are split into (ranks × micro-batches).
func (tr *Trainer) parts() int { return tr.comm.Size() * tr.micro }

// root reports whether this Trainer is rank 0 (the one that evaluates and writes files).
func (tr *Trainer) root() bool { return tr.comm.Rank() == 0 }

// Rank returns this Trainer's rank in its data-parallel run (0 without WithComm).
func (tr *Trainer) Rank() int { return tr.comm.Rank() }

// ownsWindow reports whether window i (of the run's list) is in this rank's share of its step.
func (tr *Trainer) ownsWindow(i int) bool {
	nb := tr.Config.NB
	return (i%nb)/(nb/tr.comm.Size()) == tr.comm.Rank()
}

// topKFile and topKKey are Config.TopKFile and the cache key for this rank: with several
// ranks each rank holds its own shares only, so the file and key name the rank and the
// number of ranks (a file of another split is refused and recomputed elsewhere).
func (tr *Trainer) topKFile() string {
	if R := tr.comm.Size(); R > 1 && tr.Config.TopKFile != "" {
		return fmt.Sprintf("%s.rank%dof%d", tr.Config.TopKFile, tr.comm.Rank(), R)
	}
	return tr.Config.TopKFile
}

func (tr *Trainer) topKKey(key [32]byte) [32]byte {
	if R := tr.comm.Size(); R > 1 {
		return sha256.Sum256(fmt.Appendf(key[:], "rank %d of %d", tr.comm.Rank(), R))
	}
	return key
}

// agreeStop returns ctx's error on every rank when any rank's ctx is done (one tiny sum
// per step), so that all ranks stop after the same step instead of one waiting forever in a
// collective the others left.
func (tr *Trainer) agreeStop(ctx context.Context) error {
	err := ctx.Err()
	if tr.comm.Size() == 1 {
		return err
	}
	v := []float64{0}
	if err != nil {
		v[0] = 1
	}
	if serr := tr.comm.SumFloat64(v); serr != nil {
		return serr
	}
	if v[0] > 0 && err == nil {
		return context.Canceled
	}
	return err
}

// stepParts runs step s's forward and backward as tr.parts() parts (this rank's
// micro-batches, then the sum over ranks) and leaves the global gradient in the student's
// gradient buffers: each part's Step with loss scale 1/(NB·T) starts from cleared
// gradients, its gradients are added on the host in micro-batch order into a zeroed sum,
// the sums are added over ranks in rank order (Comm.SumFloat32), and the result is written
// back. The loss is the mean KL over all NB·T tokens: per part the f64 sum of its tokens'
// KL, added in the same order. Finite is the loss's finiteness (the gradient norm is checked
// by the caller).
func (tr *Trainer) stepParts(s int) (nvgkit.StepStats, error) {
	c := tr.Config
	nbp := tr.sWork.NB
	if err := nvgkit.SetLossScale(tr.sWork, 1/float64(c.NB*c.T)); err != nil {
		return nvgkit.StepStats{}, err
	}
	defer nvgkit.SetLossScale(tr.sWork, 0)
	names := tr.student.Trainables()
	var sum []float32
	off := make([]int, len(names)+1)
	klSum := []float64{0}
	i0 := (s-1)*c.NB%c.Windows + tr.comm.Rank()*c.NB/tr.comm.Size()
	for j := range tr.micro {
		if err := nvgkit.ZeroGrads(tr.student); err != nil {
			return nvgkit.StepStats{}, err
		}
		first := i0 + j*nbp
		top, err := tr.cache.Get(first, nbp)
		if err != nil {
			return nvgkit.StepStats{}, err
		}
		st, err := nvgkit.Step(tr.student, tr.sWork, tr.inputs(tr.windows[first:first+nbp]), top)
		if err != nil {
			return nvgkit.StepStats{}, err
		}
		var part float64
		for _, v := range st.KLPerToken {
			part += float64(v)
		}
		klSum[0] += part
		g, err := nvgkit.Grads(tr.student)
		if err != nil {
			return nvgkit.StepStats{}, err
		}
		if sum == nil {
			for k, n := range names {
				off[k+1] = off[k] + len(g[n])
			}
			sum = make([]float32, off[len(names)])
		}
		for k, n := range names {
			dst := sum[off[k]:off[k+1]]
			for i, v := range g[n] {
				dst[i] += v
			}
		}
	}
	if err := tr.comm.SumFloat32(sum); err != nil {
		return nvgkit.StepStats{}, fmt.Errorf("summing the gradients over ranks: %w", err)
	}
	if err := tr.comm.SumFloat64(klSum); err != nil {
		return nvgkit.StepStats{}, fmt.Errorf("summing the loss over ranks: %w", err)
	}
	g := make(map[string][]float32, len(names))
	for k, n := range names {
		g[n] = sum[off[k]:off[k+1]]
	}
	if err := nvgkit.SetGrads(tr.student, g); err != nil {
		return nvgkit.StepStats{}, err
	}
	loss := klSum[0] / float64(c.NB*c.T)
	return nvgkit.StepStats{Loss: loss, Finite: finite(loss), Tokens: c.NB * c.T}, nil
}
