package main

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestInterleave: flags are parsed wherever they stand among the positional arguments.
func TestInterleave(t *testing.T) {
	for _, tc := range []struct {
		args []string
		o    string
		json bool
		n    int
		pos  []string
	}{
		{[]string{"A", "-o", "S.cmf"}, "S.cmf", false, 0, []string{"A"}},
		{[]string{"A", "-o=S.cmf", "B"}, "S.cmf", false, 0, []string{"A", "B"}},
		{[]string{"A", "--o", "S.cmf", "B"}, "S.cmf", false, 0, []string{"A", "B"}},
		{[]string{"--json", "A"}, "", true, 0, []string{"A"}},           // a boolean flag does not take A
		{[]string{"A", "--json", "B"}, "", true, 0, []string{"A", "B"}}, // nor B
		{[]string{"A", "--json=false", "B"}, "", false, 0, []string{"A", "B"}},
		{[]string{"A", "-n", "3", "-n", "4"}, "", false, 4, []string{"A"}}, // the last one wins
		{[]string{"A", "--", "-o", "X"}, "", false, 0, []string{"A", "-o", "X"}},
		{[]string{"-o", "X", "--", "--json"}, "X", false, 0, []string{"--json"}},
		{[]string{"-o", "--", "A"}, "--", false, 0, []string{"A"}}, // -o's value, as the flag package takes it
		{[]string{"-o", "-", "-"}, "-", false, 0, []string{"-"}},
		{[]string{"A", "--", "B", "--"}, "", false, 0, []string{"A", "B", "--"}},
		{nil, "", false, 0, []string{}},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		o := fs.String("o", "", "")
		js := fs.Bool("json", false, "")
		n := fs.Int("n", 0, "")
		args, err := interleave(fs, tc.args)
		if err == nil {
			err = fs.Parse(args)
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if *o != tc.o || *js != tc.json || *n != tc.n || !reflect.DeepEqual(fs.Args(), tc.pos) {
			t.Errorf("%q: -o %q --json %v -n %d args %q; want %q %v %d %q", tc.args, *o, *js, *n, fs.Args(), tc.o, tc.json, tc.n, tc.pos)
		}
	}
	for _, args := range [][]string{{"A", "--bogus"}, {"A", "-o"}, {"A", "-n", "x"}} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(nopWriter{})
		fs.String("o", "", "")
		fs.Int("n", 0, "")
		a, err := interleave(fs, args)
		if err == nil {
			err = fs.Parse(a)
		}
		if err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

var errParsed = errors.New("flags parsed")

// TestCommandShapes parses each command's real flags with flags after (and between) its
// positional arguments, and checks the values and positional arguments the command would
// run with (parsedHook stops it right after parsing).
func TestCommandShapes(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		flags map[string]string
		pos   []string
	}{
		{[]string{"info", "X", "--json"}, map[string]string{"json": "true"}, []string{"X"}},
		{[]string{"compress", "TEACHER", "-o", "S.cmf", "--bpw=2", "--force"}, map[string]string{"o": "S.cmf", "bpw": "2", "force": "true"}, []string{"TEACHER"}},
		{[]string{"eval", "M.cmf", "--windows", "all", "--t=64", "--host", "--files", "a.go"}, map[string]string{"windows": "all", "t": "64", "host": "true", "files": "a.go"}, []string{"M.cmf"}},
		{[]string{"import", "HF", "--force", "OUT.cmf", "--shard-bytes", "100"}, map[string]string{"force": "true", "shard-bytes": "100"}, []string{"HF", "OUT.cmf"}},
		{[]string{"export", "S.cmf", "--hf", "OUT", "--force"}, map[string]string{"hf": "OUT", "force": "true"}, []string{"S.cmf"}},
		{[]string{"tokenize", "--decode", "--tokenizer", "T.json"}, map[string]string{"decode": "true", "tokenizer": "T.json"}, []string{}},
		{[]string{"trace", "--ids", "I.json", "-o", "O.safetensors", "--host"}, map[string]string{"ids": "I.json", "o": "O.safetensors", "host": "true"}, []string{}},
		{[]string{"distill", "--steps", "3", "--keep-final", "-o", "D"}, map[string]string{"steps": "3", "keep-final": "true", "o": "D"}, []string{}},
		{[]string{"plot-mem", "L.csv", "--", "-out.png"}, map[string]string{}, []string{"L.csv", "-out.png"}},
		{[]string{"plot-mem", "L.csv", "O.png"}, map[string]string{}, []string{"L.csv", "O.png"}},
		{[]string{"bench", "--json", "B.json", "--profile=false", "--model", "tiny"}, map[string]string{"json": "B.json", "profile": "false", "model": "tiny"}, []string{}},
		{[]string{"eval"}, map[string]string{"windows": "8", "t": "128", "seed": "1"}, []string{}}, // the defaults README.md quotes
		{[]string{"info", "--", "--json"}, map[string]string{"json": "false"}, []string{"--json"}},
	} {
		var got *flag.FlagSet
		parsedHook = func(_ *command, fs *flag.FlagSet) error { got = fs; return errParsed }
		err := commands[tc.args[0]].run(tc.args[1:])
		parsedHook = nil
		if !errors.Is(err, errParsed) {
			t.Errorf("nvg %q: %v", tc.args, err)
			continue
		}
		for name, want := range tc.flags {
			if f := got.Lookup(name); f == nil || f.Value.String() != want {
				t.Errorf("nvg %q: --%s is %v, want %q", tc.args, name, f, want)
			}
		}
		if !reflect.DeepEqual(got.Args(), tc.pos) {
			t.Errorf("nvg %q: positional %q, want %q", tc.args, got.Args(), tc.pos)
		}
	}
}

// TestUnknownFlagAfterArgs: an undefined flag after the positional arguments is a usage
// error of one line (exit 2) for every command.
func TestUnknownFlagAfterArgs(t *testing.T) {
	for _, args := range [][]string{
		{"info", "X", "--bogus"}, {"compress", "T", "--bogus"}, {"eval", "M", "--bogus"},
		{"import", "A", "B", "--bogus"}, {"export", "S", "--bogus"}, {"tokenize", "--decode", "--bogus"},
		{"trace", "--ids", "I", "--bogus"}, {"distill", "--steps", "1", "--bogus"},
		{"plot-mem", "A", "B", "--bogus=1"}, {"bench", "--model", "tiny", "-bogus"},
	} {
		_, stderr, code := capture(t, args)
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "flag provided but not defined: -bogus") {
			t.Errorf("nvg %q: exit %d, stderr %q; want 2 and one line naming -bogus", args, code, stderr)
		}
	}
}

// TestDidYouMean: a mistyped flag of every command, a mistyped command and session
// subcommand get the one that was meant (issue 34); a name near nothing gets no guess.
func TestDidYouMean(t *testing.T) {
	checkUsageErrors(t, []usageCase{
		{[]string{"distill", "--stpes", "3"}, "flag provided but not defined: -stpes (did you mean --steps?)"},
		{[]string{"distill", "--teacer", "x"}, "(did you mean --teacher?)"},
		{[]string{"compress", "T", "--bwp", "1"}, "(did you mean --bpw?)"},
		{[]string{"eval", "--windws", "3"}, "(did you mean --windows?)"},
		{[]string{"export", "--hff", "x"}, "(did you mean --hf?)"},
		{[]string{"import", "A", "B", "--shard-byte", "9"}, "(did you mean --shard-bytes?)"},
		{[]string{"info", "--jsn"}, "(did you mean --json?)"},
		{[]string{"tokenize", "--decod"}, "(did you mean --decode?)"},
		{[]string{"trace", "--idz", "I"}, "(did you mean --ids?)"},
		{[]string{"bench", "--cpuprofil", "x"}, "(did you mean --cpuprofile?)"},
		{[]string{"session", "start", "--idel", "1m", "s"}, "(did you mean --idle?)"},
		{[]string{"session", "stpo", "s"}, `unknown subcommand "stpo" (did you mean stop?)`},
		{[]string{"distil"}, `unknown command "distil" (did you mean distill?)`},
		{[]string{"distill", "--zzzzzz"}, "flag provided but not defined: -zzzzzz (see"},
	})
}

// TestInfoJSONAfterModel runs `nvg info MODEL --json` end to end: the flag after MODEL is
// honoured (JSON on stdout), not refused or taken as a second MODEL.
func TestInfoJSONAfterModel(t *testing.T) {
	stdout, stderr, code := capture(t, []string{"info", "../../cmf/tinyteacher/model", "--json"})
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &v) != nil {
		t.Fatalf("exit %d, stderr %q, stdout not JSON: %.200q", code, stderr, stdout)
	}
}

// TestCorpusSources: --files and --train-files/--eval-files take directories, globs and
// JSONL corpora; sources that give no file are usage errors naming them; a bad JSONL line
// is an error naming file:line.
func TestCorpusSources(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", "sort", "sort.go"))
	if err != nil {
		t.Fatal(err)
	}
	src = src[:400] // a few windows of 8 tokens, quick on the host path
	line, _ := json.Marshal(map[string]string{"text": string(src), "source": "sort.go"})
	for name, body := range map[string]string{
		"corpus/a.jsonl": string(line) + "\n" + string(line) + "\n", "corpus/sub/b.txt": string(src), "corpus/c.bin": "\x00\x01",
		"bad.jsonl": string(line) + "\n{\"text\": 1}\n",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("NVG_CACHE", t.TempDir())
	// Three documents of sort.go: 2 lines of a.jsonl and b.txt (c.bin is not a text file).
	stdout, stderr, code := capture(t, []string{"eval", "--files", filepath.Join(dir, "corpus"), "--windows", "all", "--t", "8", "--host", "--json"})
	var res struct{ Windows int }
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil {
		t.Fatalf("eval --files DIR: exit %d, stderr %q", code, stderr)
	}
	one, _, code := capture(t, []string{"eval", "--files", filepath.Join(dir, "corpus", "sub", "*.txt"), "--windows", "all", "--t", "8", "--host", "--json"})
	var res1 struct{ Windows int }
	if code != 0 || json.Unmarshal([]byte(one), &res1) != nil || res1.Windows < 2 {
		t.Fatalf("eval --files GLOB: exit %d, %q", code, one)
	}
	if lo, hi := 3*res1.Windows, 3*(res1.Windows+1); res.Windows < lo || res.Windows > hi {
		t.Errorf("eval --files DIR: %d windows, want %d…%d (three copies of sort.go, %d windows each)", res.Windows, lo, hi, res1.Windows)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"eval", "--files", filepath.Join(dir, "*.nothing")}, 2, `--files: pattern "` + filepath.Join(dir, "*.nothing") + `" matches no file`},
		{[]string{"eval", "--files", filepath.Join(dir, "missing.txt")}, 2, "--files: " + filepath.Join(dir, "missing.txt") + ": no such file or directory"},
		{[]string{"eval", "--files", filepath.Join(dir, "bad.jsonl"), "--host"}, 1, filepath.Join(dir, "bad.jsonl") + `:2: want a JSON object with a "text" string`},
		{[]string{"eval", "--host", "--stream"}, 2, "--stream is for the GPU path"},
		{[]string{"distill", "--train-files", filepath.Join(dir, "corpus", "*.md"), "--eval-files", filepath.Join(dir, "bad.jsonl")}, 2, "--train-files: pattern"},
		{[]string{"distill", "--train-files", filepath.Join(dir, "corpus"), "--eval-files", filepath.Join(dir, "none")}, 2, "--eval-files: " + filepath.Join(dir, "none") + ": no such file"},
	} {
		_, stderr, code := capture(t, tc.args)
		if code != tc.code || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("nvg %q: exit %d, stderr %q; want %d and one line with %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}
