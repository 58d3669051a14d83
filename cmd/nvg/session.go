package main

import (
	"errors"
	"fmt"
	"github.com/nvg-project/nvg/nvgkit/train"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/session/server"
)

func init() {
	register(&command{
		name:    "session",
		summary: "manage resident GPU sessions (a server process holding a Lab that notebook cells attach to)",
		usage: "start NAME [--idle 3h] | ls | stop NAME [--timeout 1m] | bench [--reps 3] [--warm 5] [--nb 4 --t 64 --steps 24] [--keep-activations]\n\n" +
			"  start  starts the server of session NAME (detached; log in the session directory) unless it runs\n" +
			"  ls     lists the sessions: name, pid, alive/dead, state, idle time, log\n" +
			"  stop   asks the server of NAME to exit (a running call stops at a step boundary) and waits\n" +
			"  bench  times a notebook-like cell against a resident session and the same cell cold in-process",
		run: runSession,
	})
}

func runSession(args []string) error {
	c := commands["session"]
	if len(args) == 0 {
		return usagef("want a subcommand: start, ls, stop or bench")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "--help", "help":
		printHelp(c, nil)
		return errHelpShown
	case "start":
		return sessionStart(c, rest)
	case "ls":
		return sessionLs(c, rest)
	case "stop":
		return sessionStop(c, rest)
	case "serve": // hidden: what start and session.Attach spawn
		return sessionServe(c, rest)
	case "bench":
		return sessionBench(c, rest)
	}
	return usagef("unknown subcommand %q (want start, ls, stop or bench)", sub)
}

// oneName parses fs and returns its one positional argument, the session name.
func oneName(fs interface {
	NArg() int
	Arg(int) string
}, what string) (string, error) {
	if fs.NArg() != 1 {
		return "", usagef("session %s: want one session NAME, got %d arguments", what, fs.NArg())
	}
	if err := session.CheckName(fs.Arg(0)); err != nil {
		return "", usagef("session %s: %v", what, err)
	}
	return fs.Arg(0), nil
}

func sessionStart(c *command, args []string) error {
	fs := newFlags(c)
	idle := fs.Duration("idle", session.DefaultIdle, "exit after this long without a call (0: never)")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	name, err := oneName(fs, "start")
	if err != nil {
		return err
	}
	if *idle < 0 {
		return usagef("--idle %s: want ≥ 0", *idle)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cl, err := session.Attach(name, session.Binary(exe), session.IdleTimeout(*idle))
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Printf("session %s: running, pid %d, log %s\n", name, cl.Pid(), cl.LogFile())
	return nil
}

func sessionLs(c *command, args []string) error {
	fs := newFlags(c)
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("session ls takes no arguments")
	}
	list, err := session.List()
	if err != nil {
		return err
	}
	if len(list) == 0 {
		dir, _ := session.Dir()
		fmt.Printf("no sessions (in %s)\n", dir)
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPID\tSTATE\tLAB\tIDLE\tCALLS\tLOG")
	for _, s := range list {
		state, idle := "alive", "-"
		switch {
		case !s.Alive:
			state = "dead"
		case s.Err != "":
			state = "alive (not answering: " + s.Err + ")"
		case s.Busy != "":
			state = "busy (" + s.Busy + ")"
		}
		if s.Alive && s.Err == "" {
			idle = s.IdleFor.Round(time.Second).String()
			if s.Idle > 0 {
				idle += " of " + s.Idle.String()
			}
		}
		note := s.Note
		if note == "" {
			note = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\n", s.Name, s.Pid, state, note, idle, s.Calls, s.Log)
	}
	return tw.Flush()
}

func sessionStop(c *command, args []string) error {
	fs := newFlags(c)
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the server to exit")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	name, err := oneName(fs, "stop")
	if err != nil {
		return err
	}
	if err := session.Stop(name, *timeout); err != nil {
		return err
	}
	fmt.Printf("session %s: stopped\n", name)
	return nil
}

func sessionServe(c *command, args []string) error {
	fs := newFlags(c)
	idle := fs.Duration("idle", session.DefaultIdle, "exit after this long without a call (0: never)")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	name, err := oneName(fs, "serve")
	if err != nil {
		return err
	}
	if *idle < 0 {
		return usagef("--idle %s: want ≥ 0", *idle)
	}
	return server.Run(name, server.Config{Idle: *idle})
}

// sessionBench measures issue 14's cell latency: a notebook-like cell (one Step, one Grad)
// against a resident session of the embedded tiny model, and the same cell cold in-process
// (a new Lab: open the device, load, compress, teacher pass, then the step), each the
// median of several runs, the cold runs spread evenly among the warm ones; the session's
// first stepping cell, which compiles the step's kernels, is reported apart; and the go
// build time of such a cell program (it imports only nvgkit/session), which GoNB pays per
// cell. The last line is `cell latency ratio: X`, cold over warm.
func sessionBench(c *command, args []string) error {
	fs := newFlags(c)
	setup := session.DefaultSetup()
	reps := fs.Int("reps", 3, "runs of the cold cell")
	warmRuns := fs.Int("warm", 9, "runs of the warm cell (and of the transport-only and built cells)")
	keep := fs.Bool("keep-activations", false, "both cells' sessions keep the student's activations for the backward (Setup.Train.KeepActivations)")
	nb := fs.Int("nb", setup.Train.NB, "windows per step of both cells' Setup (Setup.Train.NB; the default is DefaultSetup's)")
	t := fs.Int("t", setup.Train.T, "tokens per window of both cells' Setup (Setup.Train.T)")
	steps := fs.Int("steps", setup.Train.Steps, "planned steps of both cells' Setup (Setup.Train.Steps: the teacher pass covers steps·nb windows)")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("session bench takes no arguments")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"reps", *reps}, {"warm", *warmRuns}, {"nb", *nb}, {"t", *t}, {"steps", *steps}} {
		if f.v < 1 {
			return usagef("--%s %d: want ≥ 1", f.name, f.v)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	what := "DefaultSetup"
	if *nb != setup.Train.NB || *t != setup.Train.T || *steps != setup.Train.Steps {
		what = "DefaultSetup resized"
	}
	setup.Train.NB, setup.Train.T, setup.Train.Steps = *nb, *t, *steps
	setup.Train.KeepActivations = *keep

	// The warm session, set up once (not timed).
	name := fmt.Sprintf("bench-%d", os.Getpid())
	cl, err := session.Attach(name, session.Binary(exe), session.IdleTimeout(15*time.Minute))
	if err != nil {
		return err
	}
	defer func() {
		// The bench's own session: once it has exited, its log goes too (a failed stop keeps it).
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
	}()
	info, err := cl.Setup(setup)
	if err != nil {
		cl.Close()
		return fmt.Errorf("set up the resident session: %w", err)
	}
	names, err := cl.Names()
	cl.Close()
	if err != nil {
		return err
	}
	grad := names[0]
	fmt.Printf("nvg session bench: the embedded tiny teacher, %s (NB %d, T %d, K %d, %d training windows, KeepActivations %v, ActivationBudget %d MiB), on %s\n%s\n",
		what, setup.Train.NB, setup.Train.T, setup.Train.K, info.TrainWindows, setup.Train.KeepActivations, setup.Train.ActivationBudget>>20, info.Device, info.Activations)

	// The session's first step compiles the step's kernels (the driver's JIT): a notebook pays
	// it once, in the first cell that steps. It is timed apart; the warm cells after it are
	// the steady state of interactive work.
	t0 := time.Now()
	if err := benchCell(func() (session.Lab, error) { return session.Attach(name, session.NoStart()) }, grad); err != nil {
		return fmt.Errorf("first warm cell: %w", err)
	}
	firstMS := msSince(t0)

	// Cold cells are spread evenly among the warm ones, so that a machine whose speed drifts
	// over the minutes of the run (a shared VM) moves both medians alike.
	cold, warm := make([]float64, *reps), make([]float64, *warmRuns)
	setupMS, teacherMS := make([]float64, *reps), make([]float64, *reps)
	for i, w := 0, 0; i < *reps || w < *warmRuns; {
		if i < *reps && (w >= *warmRuns || i*(*warmRuns) <= w*(*reps)) {
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
				setupMS[i], teacherMS[i] = 1000*info.SetupSeconds, 1000*info.TeacherSeconds
				return lab, nil
			}, grad); err != nil {
				return fmt.Errorf("cold cell: %w", err)
			}
			cold[i] = msSince(t0)
			i++
			continue
		}
		t0 := time.Now()
		if err := benchCell(func() (session.Lab, error) { return session.Attach(name, session.NoStart()) }, grad); err != nil {
			return fmt.Errorf("warm cell: %w", err)
		}
		warm[w] = msSince(t0)
		w++
	}
	// The transport's share of a warm cell: the same cell without the step.
	overhead := make([]float64, len(warm))
	for i := range overhead {
		t0 := time.Now()
		cl, err := session.Attach(name, session.NoStart())
		if err != nil {
			return err
		}
		_, err = cl.Grad(grad)
		cl.Close()
		if err != nil {
			return err
		}
		overhead[i] = msSince(t0)
	}
	fmt.Printf("cold cell, in-process (new Lab: open device, load, compress, teacher pass; Step(1), Grad): %s\n", msLine(cold))
	fmt.Printf("  of which Setup: median %.0f ms (its teacher pass %.0f ms)\n", median(setupMS), median(teacherMS))
	fmt.Printf("warm cell (Attach to the resident session; Step(1), Grad): %s\n", msLine(warm))
	fmt.Printf("  of which the transport (the same cell without its Step: Attach, Grad): %s\n", msLine(overhead))
	fmt.Printf("  the session's first such cell, which compiles the step's kernels: %.1f ms (not in the median)\n", firstMS)

	if err := benchBuild(name, grad, len(warm)); err != nil {
		fmt.Printf("cell compile: not measured: %v\n", err)
	}
	fmt.Printf("cell latency ratio: %.1f\n", median(cold)/median(warm))
	return nil
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
func benchBuild(name, grad string, runs int) error {
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
	fmt.Printf("cell compile (go build of the cell program, imports only nvgkit/session): %.0f ms first, %.0f ms after an edit\n", first, again)
	// The same cell written against nvgkit links the GPU engine (wgpu-native) each time.
	if _, err := build(heavyCellProgram, "lab:"); err != nil {
		return err
	}
	heavy, err := build(heavyCellProgram, "the lab:")
	if err != nil {
		return err
	}
	fmt.Printf("cell compile of a cell importing nvgkit/train instead (links the GPU engine): %.0f ms after an edit\n", heavy)
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
	fmt.Printf("warm cell as its own process (the built cell program, exec to exit): %s\n", msLine(proc))
	return nil
}

// sourceRoot is the checkout this binary was built from (the cell program must build
// against the same nvgkit/session).
func sourceRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if ok && filepath.IsAbs(file) {
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
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
