package nvgkit_test

import (
	"math"
	"slices"
	"testing"

	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// The accessors nvgkit/train uses: names and lengths agree with Grads, written values read
// back exactly, and bad input (unknown name, wrong length, a Teacher net, missing gradients,
// nil snapshot vectors) is refused with an error before anything is written.
func TestTrainableAccessors(t *testing.T) {
	_, teacher, student := kittest.RobustNets(t)
	names := student.Trainables()
	if len(names) == 0 {
		t.Fatal("no trainables")
	}
	name := names[len(names)-1]
	if !student.HasTrainable(name) || student.HasTrainable("nope") || teacher.HasTrainable(name) {
		t.Errorf("HasTrainable: %q %v, \"nope\" %v, on the teacher %v", name, student.HasTrainable(name), student.HasTrainable("nope"), teacher.HasTrainable(name))
	}
	grads, err := nvgkit.Grads(student)
	if err != nil {
		t.Fatal(err)
	}
	n, err := student.TrainableLen(name)
	if err != nil || n != len(grads[name]) || n == 0 {
		t.Fatalf("TrainableLen(%q) = %d, %v; Grads has %d values", name, n, err, len(grads[name]))
	}
	if _, err := student.TrainableLen("nope"); err == nil {
		t.Error("TrainableLen of an unknown name: no error")
	}
	if _, err := teacher.ReadTrainable(name, false); err == nil {
		t.Error("ReadTrainable on a Teacher: no error")
	}
	mask, err := student.TrainableMask(name)
	if err != nil || (mask != nil && len(mask) != n) {
		t.Fatalf("TrainableMask(%q) = %d values, %v; want nil or %d", name, len(mask), err, n)
	}

	want := make([]float32, n)
	for i := range want {
		if mask == nil || mask[i] != 0 {
			want[i] = float32(i%7) * 0.25
		}
	}
	if _, err := nvgkit.GradNorm(student); err != nil { // caches Σ g², which a gradient write must drop
		t.Fatal(err)
	}
	for _, grad := range []bool{false, true} {
		if err := student.WriteTrainable(name, want[:n-1], grad); err == nil {
			t.Errorf("WriteTrainable(grad %v) of %d values: no error", grad, n-1)
		}
		if err := student.WriteTrainable(name, want, grad); err != nil {
			t.Fatal(err)
		}
		got, err := student.ReadTrainable(name, grad)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ReadTrainable(grad %v) after WriteTrainable: %v (err %v), want %v", grad, got, err, want)
		}
	}
	if norm, err := nvgkit.GradNorm(student); err != nil {
		t.Fatal(err)
	} else if ref := sumSquaresAll(grads, name, want); math.Abs(norm*norm-ref) > 1e-5*ref {
		t.Errorf("GradNorm² after WriteTrainable = %g, want %g (a stale cached Σ g²?)", norm*norm, ref)
	}

	delete(grads, name)
	if err := nvgkit.SetGrads(student, grads); err == nil {
		t.Error("SetGrads without one gradient: no error")
	}
	if got, _ := student.ReadTrainable(name, true); !slices.Equal(got, want) {
		t.Error("a refused SetGrads wrote a gradient")
	}

	if _, err := student.Logits(make([]float32, 3), 1); err == nil {
		t.Error("Logits of 3 values for one row: no error")
	}
	if _, err := student.Logits(nil, 0); err == nil {
		t.Error("Logits of 0 rows: no error")
	}
	if _, err := nvgkit.StudentHidden(teacher, nil, []int{1}); err == nil {
		t.Error("StudentHidden of a Teacher: no error")
	}
	if err := nvgkit.CheckK("test", 0, 10); err == nil {
		t.Error("CheckK(0): no error")
	}

	s := nvgkit.NewTrainableSnapshot()
	if err := s.Set("b", []float32{1}, nil, []float32{3}); err == nil {
		t.Error("TrainableSnapshot.Set with nil m: no error")
	}
	if err := s.Set("b", []float32{1}, []float32{2}, []float32{3}); err != nil {
		t.Fatal(err)
	}
	if err := s.Set("a", []float32{4}, []float32{5}, []float32{6}); err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !slices.Equal(got, []string{"a", "b"}) || s.M("b")[0] != 2 || s.V("a")[0] != 6 || s.Param("a")[0] != 4 {
		t.Errorf("snapshot names %v, m(b) %v, v(a) %v", got, s.M("b"), s.V("a"))
	}
}

// sumSquaresAll is Σ g² in float64 over grads with grads[name] replaced by v.
func sumSquaresAll(grads map[string][]float32, name string, v []float32) float64 {
	var s float64
	for n, g := range grads {
		if n == name {
			g = v
		}
		for _, x := range g {
			s += float64(x) * float64(x)
		}
	}
	return s
}
