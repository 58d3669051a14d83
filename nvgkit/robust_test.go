package nvgkit_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/testkit/kittest"
	"github.com/nvg-project/nvg/testkit/tinytest"
)

// checkOOM fails t unless an out-of-memory error names a buffer (its quoted label), the
// bytes wanted, and the remedy.
func checkOOM(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, gpu.ErrOutOfMemory) {
		return
	}
	for _, w := range []string{`"`, "bytes", "remedy: ", "nb or t", "--stream-teacher", "eval --stream"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: out-of-memory error %q lacks %q", what, err, w)
		}
	}
}

// TestRandomGeometries is a property test of the public GPU API: for random work geometries
// (nb, t, k — valid, degenerate, negative and huge), random windows (right and wrong
// lengths, ids in and out of the vocabulary) and random GPU memory budgets (so allocations
// fail part-way), every call of NewWork, TeacherTopK, Step and LossOnly either succeeds or
// returns an error; the process is never aborted (a launch reaching Queue.Submit with a
// validation error would abort it — DESIGN.md §7 — so every launch must be checked in Go
// first), out-of-memory errors name the buffer, the bytes and the remedy, a successful
// step's loss is finite, and no GPU buffer outlives its work.
func TestRandomGeometries(t *testing.T) {
	d, teacher, student := kittest.RobustNets(t)
	defer d.SetMemoryBudget(d.MemoryBudget())
	V := teacher.Config.VocabSize
	rng := rand.New(rand.NewPCG(2026, 8))
	pick := func(small []int, odd []int) int {
		if rng.IntN(5) == 0 {
			return odd[rng.IntN(len(odd))]
		}
		return small[rng.IntN(len(small))]
	}
	windows := func(nb, t int) [][]int {
		if nb < 1 || t < 0 || nb*t > 4096 {
			return [][]int{{1, 2, 3}} // the work cannot run these; a short window is refused
		}
		n := nb
		if rng.IntN(6) == 0 {
			n = nb + 1 // one window too many
		}
		ws := make([][]int, n)
		for i := range ws {
			l := t
			if rng.IntN(10) == 0 {
				l = t + 1 + rng.IntN(2)
			}
			ws[i] = make([]int, l)
			for j := range ws[i] {
				ws[i][j] = rng.IntN(V)
			}
			if rng.IntN(12) == 0 && l > 0 {
				ws[i][rng.IntN(l)] = []int{-1, V, V + 1000}[rng.IntN(3)]
			}
		}
		return ws
	}
	base := liveMem(d)
	var ok, failed [4]int
	var ooms int
	note := func(stage int, what string, err error) bool {
		if err != nil {
			failed[stage]++
			checkOOM(t, what, err)
			if errors.Is(err, gpu.ErrOutOfMemory) {
				ooms++
			}
			return false
		}
		ok[stage]++
		return true
	}
	const iters = 40
	for it := 0; it < iters; it++ {
		nb := pick([]int{1, 2, 3}, []int{0, -1, 1 << 14, 1 << 30})
		T := pick([]int{1, 2, 5, 8, 13, 16}, []int{0, -2, 4096, 1 << 20})
		k := pick([]int{1, 4, 8, 32, 64}, []int{0, -1, 65, 1000})
		budget := uint64(0)
		if rng.IntN(4) == 0 {
			budget = liveMem(d).CurrentBytes + uint64(rng.IntN(256<<10))
		}
		d.SetMemoryBudget(budget)
		t.Logf("iteration %d: nb %d t %d k %d budget %d", it, nb, T, k, budget)
		func() {
			tw, err := nvgkit.NewWork(d, teacher, nb, T)
			if !note(0, "NewWork(teacher)", err) {
				return
			}
			defer tw.Release()
			top, err := nvgkit.TeacherTopK(teacher, tw, windows(nb, T), k)
			if !note(1, "TeacherTopK", err) {
				return
			}
			sw, err := nvgkit.NewWork(d, student, nb, T)
			if !note(0, "NewWork(student)", err) {
				return
			}
			defer sw.Release()
			ids := windows(nb, T)
			st, err := nvgkit.Step(student, sw, ids, top)
			if note(2, "Step", err) && !(st.Finite && st.Loss >= 0 && !math.IsInf(st.Loss, 0)) {
				t.Errorf("iteration %d: step loss %g (finite %v)", it, st.Loss, st.Finite)
			}
			loss, _, err := nvgkit.LossOnly(student, sw, ids, top)
			if note(3, "LossOnly", err) && !(loss >= 0 && !math.IsInf(loss, 0)) {
				t.Errorf("iteration %d: LossOnly %g", it, loss)
			}
		}()
		d.SetMemoryBudget(0)
		if err := nvgkit.ZeroGrads(student); err != nil {
			t.Fatal(err)
		}
		if m := liveMem(d); m.CurrentBytes != base.CurrentBytes || m.Buffers != base.Buffers {
			t.Fatalf("iteration %d: GPU memory %+v after releasing the works, %+v before", it, m, base)
		}
	}
	t.Logf("ok/failed: NewWork %d/%d, TeacherTopK %d/%d, Step %d/%d, LossOnly %d/%d; %d out-of-memory errors",
		ok[0], failed[0], ok[1], failed[1], ok[2], failed[2], ok[3], failed[3], ooms)
	// The property is only shown if both outcomes happened at every stage.
	for s, name := range []string{"NewWork", "TeacherTopK", "Step", "LossOnly"} {
		if ok[s] == 0 || failed[s] == 0 {
			t.Errorf("%s: %d successes and %d errors; the random geometries must give both", name, ok[s], failed[s])
		}
	}
	if ooms == 0 {
		t.Error("no out-of-memory error was provoked")
	}
}

// TestOutOfMemoryRemedy: a teacher, a work or a step that does not fit the GPU memory
// budget fails with an error naming the buffer, the bytes wanted and what to do, leaves
// nothing allocated, and the same calls succeed once memory allows.
func TestOutOfMemoryRemedy(t *testing.T) {
	d, m, teacher := kittest.TinyTeacher(t)
	defer d.SetMemoryBudget(d.MemoryBudget())
	before := liveMem(d)
	d.SetMemoryBudget(before.CurrentBytes + 1<<20)
	_, err := nvgkit.LoadNet(d, tinytest.FirstLayers(t, m, 1), nvgkit.Teacher)
	if !errors.Is(err, gpu.ErrOutOfMemory) || !strings.Contains(err.Error(), `"model.embed_tokens.weight"`) || !strings.Contains(err.Error(), "needs 4194304 bytes") {
		t.Errorf("LoadNet over the budget: %v", err)
	}
	checkOOM(t, "LoadNet", err)
	_, err = nvgkit.NewWork(d, teacher, 64, 256)
	if !errors.Is(err, gpu.ErrOutOfMemory) || !strings.Contains(err.Error(), `"work.`) {
		t.Errorf("NewWork over the budget: %v", err)
	}
	checkOOM(t, "NewWork", err)
	if after := liveMem(d); after.CurrentBytes != before.CurrentBytes || after.Buffers != before.Buffers {
		t.Errorf("failed calls left memory behind: %+v → %+v", before, after)
	}
	// A work that fits, whose pass does not (its temporaries and top-k buffers are
	// allocated while it runs).
	d.SetMemoryBudget(0)
	w := newWork(t, d, teacher, 1, 4)
	defer w.Release()
	d.SetMemoryBudget(liveMem(d).CurrentBytes + 16)
	_, err = nvgkit.TeacherTopK(teacher, w, [][]int{{1, 2, 3, 4}}, 8)
	if !errors.Is(err, gpu.ErrOutOfMemory) || !strings.Contains(err.Error(), `buffer "`) {
		t.Errorf("TeacherTopK over the budget: %v", err)
	}
	checkOOM(t, "TeacherTopK", err)
	d.SetMemoryBudget(0)
	if _, err := nvgkit.TeacherTopK(teacher, w, [][]int{{1, 2, 3, 4}}, 8); err != nil {
		t.Errorf("TeacherTopK once memory allows: %v", err)
	}
}

// liveMem is d's memory in use: MemStats after the scratch buffers kept for reuse are freed
// (gpu.Device.FreeScratch), so a leak test compares what callers hold.
func liveMem(d *gpu.Device) gpu.MemStats {
	d.FreeScratch()
	return d.MemStats()
}
