package train

import (
	"fmt"
	"math"

	"github.com/nvg-project/nvg/nvgkit"
)

// SignKnobs returns the sign-learning knobs of c: c.Signs, or nvgkit.DefaultSigns when it
// is the zero value.
func (c TrainConfig) SignKnobs() nvgkit.SignConfig {
	if c.Signs == (nvgkit.SignConfig{}) {
		return nvgkit.DefaultSigns()
	}
	return c.Signs
}

// Checkpoint tensor prefixes of the sign state (TrainSigns): the packed sign bits and the
// int8 scores of every sign matrix (nvgkit.Net.SignNames), as u32 words stored bit for bit
// in the F32 slots of the checkpoint (their CRC covers those bytes).
const (
	ckptSignsPrefix = "state/signs/"
	ckptScorePrefix = "state/score/"
)

// initSigns turns sign learning on in the student when the run trains signs (NewTrainer),
// at the step after the one the run resumes from.
func (tr *Trainer) initSigns() error {
	if !tr.Config.TrainSigns {
		return nil
	}
	tr.Config.KeepFinal = true
	if err := nvgkit.EnableSigns(tr.student, tr.Config.SignKnobs()); err != nil {
		return err
	}
	return nvgkit.SetSignStep(tr.student, tr.st.Step+1)
}

// signStep flips after Adam step s of a TrainSigns run and returns the flips per layer
// (nil when the run does not train signs, the step is in the finish or was skipped).
func (tr *Trainer) signStep(s int, ok bool) ([]int, error) {
	if !tr.trainsSigns(tr.Config.PhaseAt(s)) {
		return nil, nil // no sign learning, or the finish: the signs are frozen
	}
	if !ok {
		// The scores of a skipped step saw its gradients; the flips wait for the next step.
		return nil, nvgkit.SetSignStep(tr.student, s+1)
	}
	if err := nvgkit.SignStep(tr.student, s); err != nil {
		return nil, err
	}
	if err := tr.shareSigns(); err != nil {
		return nil, fmt.Errorf("step %d: %w", s, err)
	}
	perLayer, _, err := nvgkit.SignFlipCounts(tr.student)
	return perLayer, err
}

// shareSigns makes every rank's sign bits rank 0's after a flip step of a data-parallel run
// (DESIGN.md "Data parallelism"): rank 0's scores, fed by its own shard's gradients, decide
// the flips, and its packed bits are broadcast to the other ranks, matrix by matrix in
// SignNames order. The other ranks' scores are never read (checkpoints are rank 0's). One
// process (Size 1) does nothing.
func (tr *Trainer) shareSigns() error {
	c := tr.comm
	if c == nil || c.Size() == 1 {
		return nil
	}
	net := tr.student
	return eachSign(net, func(name string, elems int) error {
		bits := make([]byte, elems/8)
		var err error
		if c.Rank() == 0 {
			if bits, err = net.ReadSigns(name); err != nil {
				return err
			}
		}
		if err := c.Bcast(bits, 0); err != nil {
			return fmt.Errorf("broadcast the signs of %s: %w", name, err)
		}
		if c.Rank() != 0 {
			return net.WriteSigns(name, bits)
		}
		return nil
	})
}

// eachSign calls f with every sign matrix of net (SignNames order) and its number of signs,
// stopping at the first error.
func eachSign(net *nvgkit.Net, f func(name string, elems int) error) error {
	for _, name := range net.SignNames() {
		rows, cols, _, err := net.SignShape(name)
		if err == nil {
			err = f(name, rows*cols)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func wordsF32(b []byte) []float32 {
	v := make([]float32, (len(b)+3)/4)
	for i, x := range b {
		v[i/4] = math.Float32frombits(math.Float32bits(v[i/4]) | uint32(x)<<(8*(i%4)))
	}
	return v
}

func f32Bytes(v []float32, n int) ([]byte, error) {
	if len(v) != (n+3)/4 {
		return nil, fmt.Errorf("%d words, want %d", len(v), (n+3)/4)
	}
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b[:n], nil
}

// addSignTensors stores the student's sign bits and scores in ts (TrainSigns).
func (tr *Trainer) addSignTensors(ts map[string][]float32) error {
	if !tr.Config.TrainSigns {
		return nil
	}
	net := tr.student
	for _, name := range net.SignNames() {
		bits, err := net.ReadSigns(name)
		if err != nil {
			return err
		}
		sc, err := net.ReadSignScores(name)
		if err != nil {
			return err
		}
		b := make([]byte, len(sc))
		for i, v := range sc {
			b[i] = byte(v)
		}
		ts[ckptSignsPrefix+name], ts[ckptScorePrefix+name] = wordsF32(bits), wordsF32(b)
	}
	return nil
}

// restoreSigns writes the checkpoint's sign bits and scores into the student (Resume of a
// TrainSigns run). Errors: a matrix missing or of the wrong size, named.
func (tr *Trainer) restoreSigns(ts map[string][]float32) error {
	if !tr.Config.TrainSigns {
		return nil
	}
	net := tr.student
	err := eachSign(net, func(name string, elems int) error {
		bv, sv := ts[ckptSignsPrefix+name], ts[ckptScorePrefix+name]
		if bv == nil || sv == nil {
			return fmt.Errorf("checkpoint has no sign state for %s (a run without --train-signs?)", name)
		}
		bits, err := f32Bytes(bv, elems/8)
		if err != nil {
			return fmt.Errorf("checkpoint signs of %s: %w", name, err)
		}
		b, err := f32Bytes(sv, elems)
		if err != nil {
			return fmt.Errorf("checkpoint scores of %s: %w", name, err)
		}
		sc := make([]int8, len(b))
		for i, x := range b {
			sc[i] = int8(x)
		}
		if err := net.WriteSigns(name, bits); err != nil {
			return err
		}
		return net.WriteSignScores(name, sc)
	})
	if err != nil {
		return err
	}
	return nvgkit.SetSignStep(net, tr.st.Step+1)
}

// signTensorCount is the number of sign-state tensors in c that name a sign matrix of net.
func signTensorCount(c *Checkpoint, net *nvgkit.Net) int {
	k := 0
	for _, name := range net.SignNames() {
		for _, p := range []string{ckptSignsPrefix, ckptScorePrefix} {
			if _, ok := c.Tensors[p+name]; ok {
				k++
			}
		}
	}
	return k
}
