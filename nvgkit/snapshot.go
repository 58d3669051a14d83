package nvgkit

import (
	"errors"
	"fmt"
	"sort"

	"github.com/nvg-project/nvg/gpu"
)

// TrainableSnapshot is a host copy of every trainable of a Student and of its Adam moments
// (for best-eval keeping and for rolling back a bad step, DESIGN.md §6), made by Snapshot and
// written back by Restore. Gradients are not included. Each vector is f32 as on the GPU.
// (The type cannot be called Snapshot: that is the function's name.)
type TrainableSnapshot struct {
	names       []string
	param, m, v map[string][]float32
}

// Names returns the snapshot's trainable names, sorted.
func (s *TrainableSnapshot) Names() []string { return append([]string(nil), s.names...) }

// Param returns the snapshot's own copy of the named trainable's values (nil when absent):
// changing it changes what Restore writes (tests use this to perturb one value).
func (s *TrainableSnapshot) Param(name string) []float32 { return s.param[name] }

// Bytes is the host bytes the snapshot holds (12 per trained value).
func (s *TrainableSnapshot) Bytes() int {
	n := 0
	for _, name := range s.names {
		n += 4 * (len(s.param[name]) + len(s.m[name]) + len(s.v[name]))
	}
	return n
}

// Snapshot copies every trainable of a Student (norm gains and BLR metric scales, f32) and
// its Adam moments m and v to the host (three readbacks per trainable; waits for the GPU).
// Errors: a nil, released or Teacher net; a readback error.
func Snapshot(net *Net) (*TrainableSnapshot, error) {
	const op = "Snapshot"
	if err := net.requireStudent(op); err != nil {
		return nil, err
	}
	s := &TrainableSnapshot{param: map[string][]float32{}, m: map[string][]float32{}, v: map[string][]float32{}}
	for _, t := range net.st.trainables {
		p, err := net.dev.ReadFloat32(t.param)
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %s: %w", op, t.name, err)
		}
		m, err := net.dev.ReadFloat32(t.m)
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %s: %w", op, t.name, err)
		}
		v, err := net.dev.ReadFloat32(t.v)
		if err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %s: %w", op, t.name, err)
		}
		s.param[t.name], s.m[t.name], s.v[t.name] = p, m, v
		s.names = append(s.names, t.name)
	}
	sort.Strings(s.names)
	return s, nil
}

// Restore writes a snapshot's trainables and Adam moments back into net (a later Step, Adam
// or Export sees them). Every name and length is checked against the net before anything is
// written. Gradients are left as they are. Errors: a nil snapshot; a nil, released or Teacher
// net; a snapshot of another net (a missing, extra or differently sized trainable, named); a
// write error.
func Restore(net *Net, s *TrainableSnapshot) error {
	const op = "Restore"
	if err := net.requireStudent(op); err != nil {
		return err
	}
	if s == nil {
		return errors.New("nvgkit.Restore: nil snapshot")
	}
	if len(s.names) != len(net.st.trainables) {
		return fmt.Errorf("nvgkit.%s: the snapshot holds %d trainables, the net %d (a snapshot of another net?)", op, len(s.names), len(net.st.trainables))
	}
	for _, t := range net.st.trainables {
		n := t.param.Len()
		for _, v := range []struct {
			what string
			vals []float32
			ok   bool
		}{{"values", s.param[t.name], s.param[t.name] != nil}, {"adam m", s.m[t.name], s.m[t.name] != nil}, {"adam v", s.v[t.name], s.v[t.name] != nil}} {
			if !v.ok {
				return fmt.Errorf("nvgkit.%s: the snapshot has no %s for %s", op, v.what, t.name)
			}
			if len(v.vals) != n {
				return fmt.Errorf("nvgkit.%s: %s of %s: %d values, the net's has %d", op, v.what, t.name, len(v.vals), n)
			}
		}
	}
	for _, t := range net.st.trainables {
		for _, w := range []struct {
			b    *gpu.Buffer
			vals []float32
		}{{t.param, s.param[t.name]}, {t.m, s.m[t.name]}, {t.v, s.v[t.name]}} {
			if err := net.dev.WriteFloat32(w.b, w.vals); err != nil {
				return fmt.Errorf("nvgkit.%s: %s: %w", op, t.name, err)
			}
		}
	}
	return nil
}
