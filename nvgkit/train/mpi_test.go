//go:build mpi

package train_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nvg-project/nvg/internal/mpi"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// mpiCfg is the exactness test's run: 2 steps of 2 windows × 8 tokens on the tiny model.
func mpiCfg() train.TrainConfig {
	return train.TrainConfig{Steps: 2, NB: 2, T: 8, K: 8, EvalWindows: 1, Seed: 3, KeepFinal: true, Settings: schedule(0.01, 1, 0.1, 1)}
}

// mpiRun runs mpiCfg with opts and returns the per-step losses and the student's final
// trainables, flattened in Trainables order.
func mpiRun(t *testing.T, opts ...train.Option) ([]float64, []float32) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	student := kittest.LoadStudent(t, d, sm)
	tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, mpiCfg(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var hooked []int
	tr.OnGradients = func(c train.Comm, s int) error {
		hooked = append(hooked, s*10+c.Size())
		return nil
	}
	rep, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	size := 1
	if mpi.Size() > 1 {
		size = mpi.Size()
	}
	if len(hooked) != 2 || hooked[0] != 10+size || hooked[1] != 20+size {
		t.Errorf("OnGradients calls (step·10 + ranks) %v, want [%d %d]", hooked, 10+size, 20+size)
	}
	p, err := nvgkit.Params(student)
	if err != nil {
		t.Fatal(err)
	}
	var flat []float32
	for _, n := range student.Trainables() {
		flat = append(flat, p[n]...)
	}
	return rep.Loss, flat
}

// TestMPIExactness: `mpirun -np 2` of this test binary (each rank one half of every step's
// windows, gradients summed over MPI) ends with the same losses and the same trainables, bit
// for bit, as one process running each step as 2 micro-batches (WithMicroBatches(2)), and
// its losses are within 1e-4 (relative) of one process stepping the whole batch at once
// (which differs only in the f32 order of the gradient sums: DESIGN.md "Data parallelism").
// Every rank's OnGradients hook runs once per step with the run's Comm.
func TestMPIExactness(t *testing.T) {
	if out := os.Getenv("NVG_MPI_TEST_OUT"); out != "" { // a rank under mpirun
		if err := mpi.Init(); err != nil {
			t.Fatal(err)
		}
		defer mpi.Finalize()
		loss, params := mpiRun(t, train.WithComm(mpi.World{}))
		if mpi.Rank() == 0 {
			var b []byte
			for _, l := range loss {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l))
			}
			for _, p := range params {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(p))
			}
			if err := os.WriteFile(out, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Fatal("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	refLoss, refParams := mpiRun(t, train.WithMicroBatches(2))
	wholeLoss, _ := mpiRun(t)

	out := filepath.Join(t.TempDir(), "rank0.bin")
	cmd := exec.Command(mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
		"-x", "NVG_MPI_TEST_OUT="+out, os.Args[0], "-test.run", "^TestMPIExactness$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), "OMPI_MCA_rmaps_base_oversubscribe=1")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := 8*len(refLoss) + 4*len(refParams); len(got) != want {
		t.Fatalf("rank 0 wrote %d bytes, want %d", len(got), want)
	}
	for i, l := range refLoss {
		if g := math.Float64frombits(binary.LittleEndian.Uint64(got[8*i:])); math.Float64bits(g) != math.Float64bits(l) {
			t.Errorf("step %d loss: mpirun -np 2 %v, micro-batched %v", i+1, g, l)
		}
	}
	diff := 0
	for i, p := range refParams {
		g := math.Float32frombits(binary.LittleEndian.Uint32(got[8*len(refLoss)+4*i:]))
		if math.Float32bits(g) != math.Float32bits(p) {
			if diff++; diff <= 5 {
				t.Errorf("trainable value %d: mpirun -np 2 %v, micro-batched %v", i, g, p)
			}
		}
	}
	if diff > 0 {
		t.Errorf("%d of %d trainable values differ", diff, len(refParams))
	}
	for i := range refLoss {
		if d := math.Abs(refLoss[i] - wholeLoss[i]); d > 1e-4*math.Abs(wholeLoss[i]) {
			t.Errorf("step %d loss: micro-batched %v, whole batch %v (|Δ| %.3g > 1e-4 relative)", i+1, refLoss[i], wholeLoss[i], d)
		}
	}
	t.Logf("losses: 2 ranks = micro-batched %v; whole batch %v", refLoss, wholeLoss)
}

// TestMPISignsAgree runs a sign-training run (TrainSigns, 2 steps, flips on) under
// mpirun -np 2 and checks that both ranks end with the same sign bits, byte for byte, and
// that signs did flip: rank 0's scores decide the flips and its bits are broadcast
// (Trainer.shareSigns), so the ranks cannot drift apart.
func TestMPISignsAgree(t *testing.T) {
	if out := os.Getenv("NVG_MPI_SIGNS_OUT"); out != "" { // a rank under mpirun
		if err := mpi.Init(); err != nil {
			t.Fatal(err)
		}
		defer mpi.Finalize()
		d, teacher, sm, trainIDs, heldOut := trainFixture(t)
		student := kittest.LoadStudent(t, d, sm)
		cfg := mpiCfg()
		cfg.TrainSigns = true
		cfg.Signs = nvgkit.DefaultSigns()
		cfg.Signs.Tau, cfg.Signs.MaxFlipFrac = 1, 0.01 // flip from the first step
		tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, cfg, train.WithComm(mpi.World{}))
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		flips := 0
		tr.OnStep = func(i train.StepInfo) {
			for _, f := range i.SignFlips {
				flips += f
			}
		}
		if _, err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		var b []byte
		b = binary.LittleEndian.AppendUint64(b, uint64(flips))
		for _, name := range student.SignNames() {
			bits, err := student.ReadSigns(name)
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, bits...)
		}
		if err := os.WriteFile(fmt.Sprintf("%s.%d", out, mpi.Rank()), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Fatal("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	out := filepath.Join(t.TempDir(), "signs")
	cmd := exec.Command(mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
		"-x", "NVG_MPI_SIGNS_OUT="+out, os.Args[0], "-test.run", "^TestMPISignsAgree$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), "OMPI_MCA_rmaps_base_oversubscribe=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mpirun: %v\n%s", err, b)
	}
	r0, err0 := os.ReadFile(out + ".0")
	r1, err1 := os.ReadFile(out + ".1")
	if err0 != nil || err1 != nil {
		t.Fatal(err0, err1)
	}
	flips := binary.LittleEndian.Uint64(r0)
	if flips == 0 || len(r0) < 9 {
		t.Fatalf("rank 0 flipped %d signs (%d bytes written): the test needs flips", flips, len(r0))
	}
	if !bytes.Equal(r0[8:], r1[8:]) {
		n := 0
		for i := 8; i < min(len(r0), len(r1)); i++ {
			if r0[i] != r1[i] {
				n++
			}
		}
		t.Errorf("the ranks' sign bits differ in %d of %d bytes after %d flips on rank 0", n, len(r0)-8, flips)
	}
	t.Logf("%d flips on rank 0; %d bytes of sign bits identical on both ranks", flips, len(r0)-8)
}
