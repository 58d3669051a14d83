package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nvg-project/nvg/bench"
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
	return usagef("unknown subcommand %q%s (want start, ls, stop or bench)", sub, didYouMean(sub, []string{"start", "ls", "stop", "bench"}))
}

// oneName returns fs's one positional argument, the session name.
func oneName(fs *flag.FlagSet, what string) (string, error) {
	if fs.NArg() != 1 {
		return "", usagef("session %s: want one session NAME, got %d arguments", what, fs.NArg())
	}
	if err := session.CheckName(fs.Arg(0)); err != nil {
		return "", usagef("session %s: %v", what, err)
	}
	return fs.Arg(0), nil
}

// nameAndIdle parses the arguments of session start and serve: one session NAME and --idle.
func nameAndIdle(c *command, args []string, what string) (string, time.Duration, error) {
	fs := newFlags(c)
	idle := fs.Duration("idle", session.DefaultIdle, "exit after this long without a call (0: never)")
	if err := parseFlags(c, fs, args); err != nil {
		return "", 0, err
	}
	name, err := oneName(fs, what)
	if err == nil && *idle < 0 {
		err = usagef("--idle %s: want ≥ 0", *idle)
	}
	return name, *idle, err
}

func sessionStart(c *command, args []string) error {
	name, idle, err := nameAndIdle(c, args, "start")
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cl, err := session.Attach(name, session.Binary(exe), session.IdleTimeout(idle))
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
		// Every directory looked in (a notebook kernel's environment may use another), and
		// how to look elsewhere.
		dirs, err := session.Dirs()
		if err != nil {
			return err
		}
		fmt.Printf("no sessions (in %s; NVG_SESSION_DIR=DIR looks in DIR)\n", strings.Join(dirs, ", "))
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPID\tSTATE\tLAB\tIDLE\tCALLS\tLOG")
	var notes []string // what to do about a server that does not answer, or could not be asked
	for _, s := range list {
		idle := "-"
		if p := s.Problem(); p != "" {
			notes = append(notes, p)
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
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\n", s.Name, s.Pid, s.State(), note, idle, s.Calls, s.Log)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Println(n)
	}
	return nil
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
	name, idle, err := nameAndIdle(c, args, "serve")
	if err != nil {
		return err
	}
	return server.Run(name, server.Config{Idle: idle})
}

// sessionBench measures issue 14's cell latency (bench.Session): a notebook-like cell
// against a resident session and the same cell cold in-process.
func sessionBench(c *command, args []string) error {
	fs := newFlags(c)
	setup := session.DefaultSetup()
	var o bench.SessionOptions
	fs.IntVar(&o.Reps, "reps", 3, "runs of the cold cell")
	fs.IntVar(&o.Warm, "warm", 9, "runs of the warm cell (and of the transport-only and built cells)")
	fs.BoolVar(&o.Keep, "keep-activations", false, "both cells' sessions keep the student's activations for the backward (Setup.Train.KeepActivations)")
	fs.IntVar(&o.NB, "nb", setup.Train.NB, "windows per step of both cells' Setup (Setup.Train.NB; the default is DefaultSetup's)")
	fs.IntVar(&o.T, "t", setup.Train.T, "tokens per window of both cells' Setup (Setup.Train.T)")
	fs.IntVar(&o.Steps, "steps", setup.Train.Steps, "planned steps of both cells' Setup (Setup.Train.Steps: the teacher pass covers steps·nb windows)")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("session bench takes no arguments")
	}
	if err := o.Validate(); err != nil {
		return usagef("%v", err)
	}
	var err error
	if o.Binary, err = os.Executable(); err != nil {
		return err
	}
	return bench.Session(o, os.Stdout)
}
