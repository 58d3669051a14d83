package train

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nvg-project/nvg/internal/nearest"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/session"
)

// labSign is one sign matrix of the Lab's student: its shape and the projection it belongs
// to (nvgkit captures sign gradients per projection).
type labSign struct {
	shape session.SignShape
	proj  string
}

// initSigns records the student's sign matrices (Setup).
func (s *labState) initSigns() error {
	s.signNames = s.sNet.SignNames()
	s.signs = make(map[string]labSign, len(s.signNames))
	s.captured = map[string]bool{}
	for _, name := range s.signNames {
		rows, cols, live, err := s.sNet.SignShape(name)
		if err != nil {
			return err
		}
		// "<tensor>.p<path>.U": the projection is <tensor>; its layer "model.layers.<l>.…".
		proj := name[:strings.LastIndex(name[:strings.LastIndex(name, ".")], ".")]
		layer := -1
		if f := strings.Split(name, "."); len(f) > 2 && f[0] == "model" && f[1] == "layers" {
			if l, err := strconv.Atoi(f[2]); err == nil {
				layer = l
			}
		}
		s.signs[name] = labSign{shape: session.SignShape{Name: name, Rows: rows, Cols: cols, Live: live, Layer: layer}, proj: proj}
	}
	return nil
}

// sign returns the named sign matrix, or an error naming op that lists the nearest names.
// With needTraining it also refuses a Setup that does not train signs.
func (l *Lab) sign(op, name string, needTraining bool) (*labState, labSign, error) {
	s, err := l.ready(op)
	if err != nil {
		return nil, labSign{}, err
	}
	if needTraining && !s.setup.Train.TrainSigns {
		return nil, labSign{}, fmt.Errorf("train.Lab.%s: sign training is off: set Setup.Train.TrainSigns (Setup with Replace) — only then are there scores, and only then do snapshots and checkpoints carry the signs", op)
	}
	m, ok := s.signs[name]
	if !ok {
		return nil, labSign{}, fmt.Errorf("train.Lab.%s: no sign matrix %q (nearest: %s; SignNames lists all %d)", op, name, strings.Join(nearest.Names(name, s.signNames, 4), ", "), len(s.signNames))
	}
	return s, m, nil
}

// SignNames returns the sign matrices' names in load order (see session.Lab.SignNames).
func (l *Lab) SignNames() ([]string, error) {
	s, err := l.ready("SignNames")
	if err != nil {
		return nil, err
	}
	return append([]string(nil), s.signNames...), nil
}

// SignShape returns the named sign matrix's shape (see session.Lab.SignShape).
func (l *Lab) SignShape(name string) (session.SignShape, error) {
	_, m, err := l.sign("SignShape", name, false)
	return m.shape, err
}

// Signs returns the named matrix's packed sign bits (see session.Lab.Signs).
func (l *Lab) Signs(name string) ([]byte, error) {
	s, _, err := l.sign("Signs", name, false)
	if err != nil {
		return nil, err
	}
	b, err := s.sNet.ReadSigns(name)
	if err != nil {
		return nil, fmt.Errorf("train.Lab.Signs: %w", err)
	}
	return b, nil
}

// SetSigns overwrites the named matrix's sign bits, padded ranks unchanged (see
// session.Lab.SetSigns).
func (l *Lab) SetSigns(name string, bits []byte) error {
	const op = "SetSigns"
	s, m, err := l.sign(op, name, true)
	if err != nil {
		return err
	}
	sh := m.shape
	if len(bits) != sh.Bytes() {
		return fmt.Errorf("train.Lab.%s %s: %d bytes, want Rows·Cols/8 = %d·%d/8 = %d", op, name, len(bits), sh.Rows, sh.Cols, sh.Bytes())
	}
	old, err := s.sNet.ReadSigns(name)
	if err != nil {
		return fmt.Errorf("train.Lab.%s: %w", op, err)
	}
	for e := range sh.Elements() {
		if !sh.IsLive(e) && (old[e>>3]^bits[e>>3])>>(e&7)&1 != 0 {
			return fmt.Errorf("train.Lab.%s %s: element %d (row %d, column %d) is rank padding (live ranks: %d) and must keep its bit", op, name, e, e/sh.Cols, e%sh.Cols, sh.Live)
		}
	}
	if err := s.sNet.WriteSigns(name, bits); err != nil {
		return fmt.Errorf("train.Lab.%s: %w", op, err)
	}
	return nil
}

// SignScores returns the named matrix's int8 scores (see session.Lab.SignScores).
func (l *Lab) SignScores(name string) ([]int8, error) {
	s, _, err := l.sign("SignScores", name, true)
	if err != nil {
		return nil, err
	}
	v, err := s.sNet.ReadSignScores(name)
	if err != nil {
		return nil, fmt.Errorf("train.Lab.SignScores: %w", err)
	}
	return v, nil
}

// SetSignScores overwrites the named matrix's scores (see session.Lab.SetSignScores).
func (l *Lab) SetSignScores(name string, scores []int8) error {
	const op = "SetSignScores"
	s, m, err := l.sign(op, name, true)
	if err != nil {
		return err
	}
	sh := m.shape
	if len(scores) != sh.Elements() {
		return fmt.Errorf("train.Lab.%s %s: %d scores, want Rows·Cols = %d·%d = %d", op, name, len(scores), sh.Rows, sh.Cols, sh.Elements())
	}
	for e, v := range scores {
		switch {
		case v == -128:
			return fmt.Errorf("train.Lab.%s %s: score %d (row %d, column %d) is −128, want −127…127", op, name, e, e/sh.Cols, e%sh.Cols)
		case v != 0 && !sh.IsLive(e):
			return fmt.Errorf("train.Lab.%s %s: score %d (row %d, column %d) is %d but rank padding must score 0 (live ranks: %d)", op, name, e, e/sh.Cols, e%sh.Cols, v, sh.Live)
		}
	}
	if err := s.sNet.WriteSignScores(name, scores); err != nil {
		return fmt.Errorf("train.Lab.%s: %w", op, err)
	}
	return nil
}

// CaptureSignGrad starts or stops keeping the named matrix's sign gradient (see
// session.Lab.CaptureSignGrad).
func (l *Lab) CaptureSignGrad(name string, on bool) error {
	const op = "CaptureSignGrad"
	s, m, err := l.sign(op, name, false)
	if err != nil {
		return err
	}
	if s.captured[name] == on {
		return nil
	}
	if !on {
		delete(s.captured, name)
		for other := range s.captured {
			if s.signs[other].proj == m.proj {
				return nil // the projection's buffers stay for the other matrix
			}
		}
	}
	if err := s.sNet.CaptureSignGrad(name, on); err != nil {
		return fmt.Errorf("train.Lab.%s: %w", op, err)
	}
	if on {
		s.captured[name] = true
	}
	return nil
}

// SignGrad returns the named matrix's captured sign gradient (see session.Lab.SignGrad).
func (l *Lab) SignGrad(name string) ([]float32, error) {
	const op = "SignGrad"
	s, _, err := l.sign(op, name, false)
	if err != nil {
		return nil, err
	}
	if !s.captured[name] {
		return nil, fmt.Errorf("train.Lab.%s: %s is not captured: call CaptureSignGrad(%q, true), then ForwardBackward or Step", op, name, name)
	}
	g, err := s.sNet.ReadSignGrad(name, false)
	if err != nil {
		return nil, fmt.Errorf("train.Lab.%s: %w", op, err)
	}
	return g, nil
}

// ApplySignFlips XORs mask into the named matrix's signs and resets the flipped scores (see
// session.Lab.ApplySignFlips).
func (l *Lab) ApplySignFlips(name string, mask []byte) (int, error) {
	const op = "ApplySignFlips"
	s, m, err := l.sign(op, name, true)
	if err != nil {
		return 0, err
	}
	sh := m.shape
	if len(mask) != sh.Bytes() {
		return 0, fmt.Errorf("train.Lab.%s %s: mask of %d bytes, want Rows·Cols/8 = %d·%d/8 = %d", op, name, len(mask), sh.Rows, sh.Cols, sh.Bytes())
	}
	for e := range sh.Elements() {
		if mask[e>>3]>>(e&7)&1 != 0 && !sh.IsLive(e) {
			return 0, fmt.Errorf("train.Lab.%s %s: mask bit %d (row %d, column %d) is on rank padding (live ranks: %d), which never flips", op, name, e, e/sh.Cols, e%sh.Cols, sh.Live)
		}
	}
	n, err := s.sNet.ApplySignFlips(name, mask)
	if err != nil {
		return 0, fmt.Errorf("train.Lab.%s: %w", op, err)
	}
	return n, nil
}

// signState is the sign bits and scores of every sign matrix (a snapshot of a TrainSigns
// Lab).
type signState struct {
	bits   map[string][]byte
	scores map[string][]int8
}

// readSignState reads every matrix's bits and scores (nil when the Setup does not train
// signs).
func (s *labState) readSignState() (*signState, error) {
	if !s.setup.Train.TrainSigns {
		return nil, nil
	}
	st := &signState{bits: map[string][]byte{}, scores: map[string][]int8{}}
	for _, name := range s.signNames {
		var err error
		if st.bits[name], err = s.sNet.ReadSigns(name); err != nil {
			return nil, err
		}
		if st.scores[name], err = s.sNet.ReadSignScores(name); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// writeSignState writes st back and sets the step the next score updates belong to (the
// step after step).
func (s *labState) writeSignState(st *signState, step int) error {
	if st == nil {
		return nil
	}
	for _, name := range s.signNames {
		if err := s.sNet.WriteSigns(name, st.bits[name]); err != nil {
			return err
		}
		if err := s.sNet.WriteSignScores(name, st.scores[name]); err != nil {
			return err
		}
	}
	return nvgkit.SetSignStep(s.sNet, step+1)
}

// pauseSigns keeps a side computation's backwards (GradCheck) from touching the sign scores
// and captured sign gradients; the returned function resumes them.
func (s *labState) pauseSigns() (resume func() error, err error) {
	if err := nvgkit.PauseSigns(s.sNet, true); err != nil {
		return nil, err
	}
	return func() error { return nvgkit.PauseSigns(s.sNet, false) }, nil
}
