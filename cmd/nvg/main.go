// Command nvg distils binary-low-rank compressed Qwen3.5 models against their teacher on the
// GPU through WebGPU. Run `nvg help` for the subcommands; each takes -h.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/nvg-project/nvg/internal/nearest"
	"github.com/nvg-project/nvg/internal/version"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// command is one subcommand: its one-line summary, usage line and body. run gets the
// arguments after the subcommand name and returns an error to print; a usageError (bad
// flags, missing arguments) exits with status 2, any other error with status 1.
type command struct {
	name    string
	summary string
	usage   string // arguments after "nvg NAME"
	run     func(args []string) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// usageError marks an error in how nvg was called (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// interruptedError marks a command stopped by a signal (after it cleaned up and said so):
// the exit status is 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a
// shell reports a process killed by it.
type interruptedError struct{ sig syscall.Signal }

func (e interruptedError) Error() string { return "interrupted by " + e.sig.String() }

func (e interruptedError) exitCode() int { return 128 + int(e.sig) }

// newFlags returns a FlagSet for a subcommand whose errors come back as usageErrors
// instead of exiting, and whose -h prints the usage line and flags.
func newFlags(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("nvg "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args with fs, turning -h into printed help and errors into usageErrors.
// Flags may come before, between or after the positional arguments (`nvg info MODEL --json`
// is `nvg info --json MODEL`); see interleave. The positional arguments, in order, are then
// fs.Args().
func parseFlags(c *command, fs *flag.FlagSet, args []string) error {
	args, err := interleave(fs, args)
	if err == nil {
		err = fs.Parse(args)
	}
	if errors.Is(err, flag.ErrHelp) {
		printHelp(c, fs)
		return errHelpShown
	}
	if err != nil {
		return usageError{err.Error() + didYouMeanFlag(fs, err)}
	}
	if parsedHook != nil {
		return parsedHook(c, fs)
	}
	return nil
}

// didYouMeanFlag is " (did you mean --steps?)" for the flag package's error about an
// undefined flag near one of fs's, else "".
func didYouMeanFlag(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return ""
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if s := nearest.Suggest(strings.TrimLeft(name, "-"), names); s != "" {
		return " (did you mean --" + s + "?)"
	}
	return ""
}

// didYouMean is " (did you mean NAME?)" when one of names is near name, else "".
func didYouMean(name string, names []string) string {
	if s := nearest.Suggest(name, names); s != "" {
		return " (did you mean " + s + "?)"
	}
	return ""
}

// parsedHook, when set (by tests), is called after a command's flags are parsed and its
// result is returned in place of running the command.
var parsedHook func(c *command, fs *flag.FlagSet) error

// interleave reorders args so that Go's flag package, which stops at the first positional
// argument, sees every flag: the flag tokens (each with its value when the flag takes one)
// come first in their given order, then "--", then the positional arguments in their given
// order. A token is a flag when it starts with "-" and is longer than "-"; "--" ends the
// flags (everything after it is positional, even "-x"). A flag written -name=value is one
// token; a boolean flag (-json) never takes the next token as its value; any other defined
// flag written without "=" takes the next token whatever it is (as the flag package does:
// `-o -x` sets -o to "-x"); when there is none, the error is the flag package's "flag needs
// an argument". An undefined flag is passed on as it is, so fs.Parse reports it.
func interleave(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimPrefix(a[1:], "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 == len(args) {
			return nil, fmt.Errorf("flag needs an argument: %s", a)
		}
		i++
		flags = append(flags, args[i])
	}
	return append(append(flags, "--"), pos...), nil
}

var errHelpShown = errors.New("help shown")

func printHelp(c *command, fs *flag.FlagSet) {
	fmt.Printf("usage: nvg %s %s\n\n%s\n", c.name, c.usage, c.summary)
	if fs != nil {
		fs.SetOutput(os.Stdout)
		fmt.Println("\nflags:")
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

func mainUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: nvg COMMAND [flags] [args]\n\ncommands:")
	for _, n := range sortedNames() {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'nvg COMMAND -h' for a command's flags.")
}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) == 0 {
		// No command is a usage error (as with any tool that needs one): usage on stderr, 2.
		mainUsage(os.Stderr)
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return run([]string{c.name, "-h"})
			}
		}
		mainUsage(os.Stdout)
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" || args[0] == "version" {
		fmt.Println(version.Get()) // "nvg VERSION (COMMIT[, modified], GO_VERSION; commit from SOURCE)", as report.json records it
		return 0
	}
	if msg := checkMPILaunch(); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		return 2
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "nvg: unknown command %q%s (commands: %s)\n", args[0], didYouMean(args[0], sortedNames()), strings.Join(sortedNames(), ", "))
		return 2
	}
	err := c.run(args[1:])
	var ie interruptedError
	switch {
	case err == nil, errors.Is(err, errHelpShown):
		return 0
	case errors.As(err, &ie):
		return ie.exitCode()
	case errors.As(err, new(usageError)), errors.As(err, new(*train.InputError)):
		fmt.Fprintf(os.Stderr, "nvg %s: %v (see 'nvg %s -h')\n", c.name, err, c.name)
		return 2
	default:
		fmt.Fprintf(os.Stderr, "nvg %s: %v\n", c.name, err)
		return 1
	}
}

// sortedNames are the commands' names in order.
func sortedNames() []string { return slices.Sorted(maps.Keys(commands)) }
