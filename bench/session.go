package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// SessionOptions are nvg session bench's settings.
type SessionOptions struct {
	Reps, Warm   int    // runs of the cold cell and of the warm one (≥ 1)
	NB, T, Steps int    // both cells' Setup.Train.NB, T and Steps (DefaultSetup's unless changed)
	Keep         bool   // both cells' sessions keep the student's activations
	Binary       string // the nvg executable that serves the session
}

// Session measures issue 14's cell latency and writes it to w: a notebook-like cell (one
// Step, one Grad) against a resident session of the embedded tiny model, and the same cell
// cold in-process (a new Lab: open the device, load, compress, teacher pass, then the step),
// each the median of several runs, the cold runs spread evenly among the warm ones; the
// session's first stepping cell, which compiles the step's kernels, is reported apart; and
// the go build time of such a cell program (it imports only nvgkit/session), which GoNB pays
// per cell. The last line is `cell latency ratio: X`, cold over warm.
func Session(o SessionOptions, w io.Writer) error {
	setup := session.DefaultSetup()
	what := "DefaultSetup"
	if o.NB != setup.Train.NB || o.T != setup.Train.T || o.Steps != setup.Train.Steps {
		what = "DefaultSetup resized"
	}
	setup.Train.NB, setup.Train.T, setup.Train.Steps = o.NB, o.T, o.Steps
	setup.Train.KeepActivations = o.Keep
	// The Dual-SVID start and the KL alone, as when issue 14 set the target: the refined
	// initialisation would add its ~45 s of host work to every cold cell, and the ratio would
	// measure the compressor rather than the session.
	setup.Init, setup.Train.HiddenLoss = "dual-svid", ""
	name := fmt.Sprintf("bench-%d", os.Getpid())
	defer stopSession(name)
	info, grad, err := startSession(name, o.Binary, setup)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "nvg session bench: the embedded tiny teacher, %s with Init %s and the KL alone (NB %d, T %d, K %d, %d training windows, KeepActivations %v, ActivationBudget %d MiB), on %s\n%s\n",
		what, setup.Init, setup.Train.NB, setup.Train.T, setup.Train.K, info.TrainWindows, setup.Train.KeepActivations, setup.Train.ActivationBudget>>20, info.Device, info.Activations)
	// The session's first step compiles the step's kernels (the driver's JIT): a notebook pays
	// it once, in the first cell that steps. It is timed apart; the warm cells after it are
	// the steady state of interactive work.
	attach := func() (session.Lab, error) { return session.Attach(name, session.NoStart()) }
	t0 := time.Now()
	if err := benchCell(attach, grad); err != nil {
		return fmt.Errorf("first warm cell: %w", err)
	}
	firstMS := msSince(t0)
	c, err := timeCells(o, setup, attach, grad)
	if err != nil {
		return err
	}
	overhead, err := transportCells(name, grad, len(c.warm))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "cold cell, in-process (new Lab: open device, load, compress, teacher pass; Step(1), Grad): %s\n", msLine(c.cold))
	fmt.Fprintf(w, "  of which Setup: median %.0f ms (its teacher pass %.0f ms)\n", median(c.setupMS), median(c.teacherMS))
	fmt.Fprintf(w, "warm cell (Attach to the resident session; Step(1), Grad): %s\n", msLine(c.warm))
	fmt.Fprintf(w, "  of which the transport (the same cell without its Step: Attach, Grad): %s\n", msLine(overhead))
	fmt.Fprintf(w, "  the session's first such cell, which compiles the step's kernels: %.1f ms (not in the median)\n", firstMS)
	if err := benchBuild(w, name, grad, len(c.warm)); err != nil {
		fmt.Fprintf(w, "cell compile: not measured: %v\n", err)
	}
	fmt.Fprintf(w, "cell latency ratio: %.1f\n", median(c.cold)/median(c.warm))
	return nil
}

// startSession starts the bench's resident session name (served by binary) and sets it up
// (not timed); it returns its Info and the name of the gradient the cells fetch.
func startSession(name, binary string, setup session.Setup) (session.Info, string, error) {
	cl, err := session.Attach(name, session.Binary(binary), session.IdleTimeout(15*time.Minute))
	if err != nil {
		return session.Info{}, "", err
	}
	defer cl.Close()
	info, err := cl.Setup(setup)
	if err != nil {
		return info, "", fmt.Errorf("set up the resident session: %w", err)
	}
	names, err := cl.Names()
	if err != nil {
		return info, "", err
	}
	return info, names[0], nil
}

// stopSession stops the bench's own session; once it has exited, its log goes too (a failed
// stop keeps it).
func stopSession(name string) {
	var log string
	if l, err := session.List(); err == nil {
		for _, s := range l {
			if s.Name == name {
				log = s.Log
			}
		}
	}
	if session.Stop(name, time.Minute) == nil && log != "" {
		os.Remove(log)
	}
}

// cellTimes are the cold and warm cells' times (ms), and the cold cells' Setup and teacher
// pass.
type cellTimes struct{ cold, warm, setupMS, teacherMS []float64 }

// timeCells times the cold cells (a new in-process Lab each) and the warm ones (attach);
// cold cells are spread evenly among the warm ones, so that a machine whose speed drifts
// over the minutes of the run (a shared VM) moves both medians alike.
func timeCells(o SessionOptions, setup session.Setup, attach func() (session.Lab, error), grad string) (cellTimes, error) {
	c := cellTimes{cold: make([]float64, o.Reps), warm: make([]float64, o.Warm), setupMS: make([]float64, o.Reps), teacherMS: make([]float64, o.Reps)}
	for i, w := 0, 0; i < o.Reps || w < o.Warm; {
		if i < o.Reps && (w >= o.Warm || i*o.Warm <= w*o.Reps) {
			t0 := time.Now()
			if err := benchCell(func() (session.Lab, error) {
				lab, err := train.NewLab()
				if err != nil {
					return nil, err
				}
				info, err := lab.Setup(setup)
				if err != nil {
					lab.Close()
					return nil, err
				}
				c.setupMS[i], c.teacherMS[i] = 1000*info.SetupSeconds, 1000*info.TeacherSeconds
				return lab, nil
			}, grad); err != nil {
				return c, fmt.Errorf("cold cell: %w", err)
			}
			c.cold[i] = msSince(t0)
			i++
			continue
		}
		t0 := time.Now()
		if err := benchCell(attach, grad); err != nil {
			return c, fmt.Errorf("warm cell: %w", err)
		}
		c.warm[w] = msSince(t0)
		w++
	}
	return c, nil
}

// transportCells times the transport's share of a warm cell: the same cell without the
// step (attach, one gradient), n times.
func transportCells(name, grad string, n int) ([]float64, error) {
	overhead := make([]float64, n)
	for i := range overhead {
		t0 := time.Now()
		cl, err := session.Attach(name, session.NoStart())
		if err != nil {
			return nil, err
		}
		_, err = cl.Grad(grad)
		cl.Close()
		if err != nil {
			return nil, err
		}
		overhead[i] = msSince(t0)
	}
	return overhead, nil
}

// benchCell is one notebook cell: get a Lab, run one step, fetch one gradient, let go.
func benchCell(open func() (session.Lab, error), grad string) error {
	lab, err := open()
	if err != nil {
		return err
	}
	defer lab.Close()
	if _, err := lab.Step(1); err != nil {
		return err
	}
	_, err = lab.Grad(grad)
	return err
}

// cellProgram is the notebook-like cell as a program: it imports only nvgkit/session.
const cellProgram = `package main

import (
	"fmt"
	"os"

	"github.com/nvg-project/nvg/nvgkit/session"
)

func main() {
	c, err := session.Attach(os.Args[1], session.NoStart())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	if _, err := c.Step(1); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	g, err := c.Grad(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("EDIT", len(g))
}
`

// heavyCellProgram is a cell that runs the Lab in-process (nvgkit/train, which links the GPU
// engine through nvgkit), as notebooks did before sessions.
const heavyCellProgram = `package main

import (
	"fmt"

	"github.com/nvg-project/nvg/nvgkit/train"
)

func main() {
	lab, err := train.NewLab()
	fmt.Println("EDIT", lab != nil, err)
}
`

// benchBuild times `go build` of the cell program in a module that replaces nvg by this
// checkout (first build, then after an edit, as GoNB rebuilds a changed cell), and runs the
// built cell as its own process against session name.
func benchBuild(w io.Writer, name, grad string, runs int) error {
	root, err := sourceRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nvg-bench-cell-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	gomod := fmt.Sprintf("module nvgbenchcell\n\ngo 1.26\n\nrequire github.com/nvg-project/nvg v0.0.0\n\nreplace github.com/nvg-project/nvg => %s\n", root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		return err
	}
	build := func(program, edit string) (float64, error) {
		src := strings.Replace(program, "EDIT", edit, 1)
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			return 0, err
		}
		cmd := exec.Command("go", "build", "-o", "cell", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("go build: %v\n%s", err, out)
		}
		return msSince(t0), nil
	}
	first, err := build(cellProgram, "gradient values:")
	if err != nil {
		return err
	}
	again, err := build(cellProgram, "gradient length:")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "cell compile (go build of the cell program, imports only nvgkit/session): %.0f ms first, %.0f ms after an edit\n", first, again)
	// The same cell written against nvgkit links the GPU engine (wgpu-native) each time.
	if _, err := build(heavyCellProgram, "lab:"); err != nil {
		return err
	}
	heavy, err := build(heavyCellProgram, "the lab:")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "cell compile of a cell importing nvgkit/train instead (links the GPU engine): %.0f ms after an edit\n", heavy)
	if _, err := build(cellProgram, "gradient length:"); err != nil { // the light cell again, to run it
		return err
	}
	proc := make([]float64, runs)
	for i := range proc {
		t0 := time.Now()
		if out, err := exec.Command(filepath.Join(dir, "cell"), name, grad).CombinedOutput(); err != nil {
			return fmt.Errorf("the built cell: %v\n%s", err, out)
		}
		proc[i] = msSince(t0)
	}
	fmt.Fprintf(w, "warm cell as its own process (the built cell program, exec to exit): %s\n", msLine(proc))
	return nil
}

// sourceRoot is the checkout this binary was built from (the cell program must build
// against the same nvgkit/session).
func sourceRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if ok && filepath.IsAbs(file) {
		root := filepath.Dir(filepath.Dir(file)) // bench/session.go
		if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/nvg-project/nvg\n") {
			return root, nil
		}
	}
	return "", errors.New("the nvg source checkout this binary was built from is not found (build nvg from a checkout, without -trimpath)")
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

// msLine is "median X ms of N runs (a, b, c ms)".
func msLine(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("median %.1f ms of %d runs (%s ms)", median(v), len(v), strings.Join(parts, ", "))
}
