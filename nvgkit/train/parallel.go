package train

import (
	"context"
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

// topKFile is Config.TopKFile, or "" with several ranks: a rank holds the top-k of its own
// shares only, which TopKCache.Save refuses as incomplete (TODO: a cache of shares), so a
// data-parallel run computes the teacher's top-k at every start.
func (tr *Trainer) topKFile() string {
	if tr.comm.Size() > 1 {
		return ""
	}
	return tr.Config.TopKFile
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
// KL, added in the same order; with a hidden-state loss its mean is added the same way (each
// part's Hidden times its tokens) and the loss is KL + λ·Hidden — in a block step the
// layer's reconstruction error (BlockStep's Hidden) alone. Finite is the loss's finiteness
// (the gradient norm is checked by the caller).
func (tr *Trainer) stepParts(s int) (nvgkit.StepStats, error) {
	c := tr.Config
	nbp := tr.sWork.NB
	if err := nvgkit.SetLossScale(tr.sWork, 1/float64(c.NB*c.T)); err != nil {
		return nvgkit.StepStats{}, err
	}
	defer nvgkit.SetLossScale(tr.sWork, 0)
	var sum []float32
	parts := []float64{0, 0} // Σ KL and Σ Hidden over the tokens
	i0 := (s-1)*c.NB%c.Windows + tr.comm.Rank()*c.NB/tr.comm.Size()
	for j := range tr.micro {
		if err := nvgkit.ZeroGrads(tr.student); err != nil {
			return nvgkit.StepStats{}, err
		}
		st, err := tr.stepBatch(s, i0+j*nbp, nbp)
		if err != nil {
			return nvgkit.StepStats{}, err
		}
		var part float64
		for _, v := range st.KLPerToken {
			part += float64(v)
		}
		parts[0] += part
		parts[1] += st.Hidden * float64(st.Tokens)
		g, err := flatGrads(tr.student)
		if err != nil {
			return nvgkit.StepStats{}, err
		}
		if sum == nil {
			sum = make([]float32, len(g))
		}
		for i, v := range g {
			sum[i] += v
		}
	}
	if err := tr.comm.SumFloat32(sum); err != nil {
		return nvgkit.StepStats{}, fmt.Errorf("summing the gradients over ranks: %w", err)
	}
	if err := tr.comm.SumFloat64(parts); err != nil {
		return nvgkit.StepStats{}, fmt.Errorf("summing the loss over ranks: %w", err)
	}
	if err := setFlatGrads(tr.student, sum); err != nil {
		return nvgkit.StepStats{}, err
	}
	kl, hidden := parts[0]/float64(c.NB*c.T), parts[1]/float64(c.NB*c.T)
	loss := kl + tr.hidden.Weight*hidden
	if c.PhaseAt(s).Kind == PhaseBlock {
		loss = hidden
	}
	return nvgkit.StepStats{Loss: loss, KL: kl, Hidden: hidden, Finite: finite(loss), Tokens: c.NB * c.T}, nil
}

// SumGrads replaces the student net's gradients by their sum over c's ranks (read to the
// host, Comm.SumFloat32 in rank order, written back): the exchange of a data-parallel step
// after each rank's Step (nvg bench's data-parallel mode). Errors: Grads', the Comm's and
// SetGrads'.
func SumGrads(net *nvgkit.Net, c Comm) error {
	g, err := flatGrads(net)
	if err != nil {
		return err
	}
	if err := c.SumFloat32(g); err != nil {
		return fmt.Errorf("summing the gradients over ranks: %w", err)
	}
	return setFlatGrads(net, g)
}

// flatGrads returns the net's gradients (Grads) concatenated in Trainables order.
func flatGrads(net *nvgkit.Net) ([]float32, error) {
	g, err := nvgkit.Grads(net)
	if err != nil {
		return nil, err
	}
	var flat []float32
	for _, n := range net.Trainables() {
		flat = append(flat, g[n]...)
	}
	return flat, nil
}

// setFlatGrads writes flat (flatGrads' layout) into the net's gradients. Errors: a length
// that is not the nets' (SetGrads names the trainable) and SetGrads'.
func setFlatGrads(net *nvgkit.Net, flat []float32) error {
	g := map[string][]float32{}
	off := 0
	for _, n := range net.Trainables() {
		l, err := net.TrainableLen(n)
		if err != nil {
			return err
		}
		if off+l > len(flat) {
			return fmt.Errorf("train: %d gradient values for the net's trainables (more needed at %s)", len(flat), n)
		}
		g[n] = flat[off : off+l]
		off += l
	}
	if off != len(flat) {
		return fmt.Errorf("train: %d gradient values for the net's %d", len(flat), off)
	}
	return nvgkit.SetGrads(net, g)
}
