package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"

	"github.com/nvg-project/nvg/arch"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
)

// defaultModelName is how the embedded tiny teacher is named in output.
const defaultModelName = "embedded qwen35-tiny-go"

// openModel opens the model at path (an HF directory, a .cmf file or a sharded CMF
// directory), or the embedded tiny teacher when path is "". A path that does not exist, or
// a directory with no config.json and no CMF index, is a usage error (exit 2).
func openModel(path string) (*cmf.Model, error) {
	if path == "" {
		return tinyteacher.Open()
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, usagef("model %s: no such file or directory", path)
	}
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		found := false
		for _, n := range []string{cmf.HFConfigName, cmf.CMFIndexName, cmf.CMFFileName} {
			p := filepath.Join(path, n)
			if fi, err := os.Stat(p); err == nil {
				if fi.IsDir() {
					return nil, usagef("model %s: %s is a directory, not a file", path, p)
				}
				found = true
			}
		}
		if !found {
			return nil, usagef("model %s: directory has no %s (not an HF checkpoint) and no %s or %s (not a CMF model)",
				path, cmf.HFConfigName, cmf.CMFIndexName, cmf.CMFFileName)
		}
	}
	if !st.IsDir() && isTextFile(path) {
		hint := ""
		if d := filepath.Dir(path); exists(filepath.Join(d, "config.json")) {
			hint = fmt.Sprintf(" (for the checkpoint it belongs to, give its directory: %s)", d)
		}
		return nil, usagef("model %s is a text file, not a model: want an HF checkpoint directory, a .cmf or .safetensors file, or a sharded CMF directory%s", path, hint)
	}
	return cmf.Open(path)
}

// isTextFile reports whether the file at path starts with 8 bytes of printable ASCII or
// white space (JSON, a README…): a safetensors/CMF file starts with a little-endian header
// length, whose high bytes are zero.
func isTextFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [8]byte
	if n, _ := io.ReadFull(f, b[:]); n < len(b) {
		return n > 0 && b[0] == '{'
	}
	for _, c := range b {
		if !(c >= 0x20 && c < 0x7f || c == '\n' || c == '\r' || c == '\t') {
			return false
		}
	}
	return true
}

// modelName is the name to print for a model path ("" = the embedded default).
func modelName(path string) string {
	if path == "" {
		return defaultModelName
	}
	return path
}

// checkOutFile validates an output file path before any work: not a directory, its directory
// exists, and (unless force) nothing is there yet. flag names the option in the message.
func checkOutFile(flag, p string, force bool) error {
	st, err := os.Stat(p)
	switch {
	case err == nil && st.IsDir():
		return usagef("%s %s is a directory; give a file path", flag, p)
	case err == nil && !force:
		return usagef("%s %s exists; pass --force to replace it", flag, p)
	case err != nil && !os.IsNotExist(err):
		return usagef("%s %s: %v", flag, p, err)
	}
	dir := filepath.Dir(p)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usagef("%s %s: directory %s does not exist", flag, p, dir)
	}
	return nil
}

// tokenizerName names a --tokenizer value in errors ("the model's tokenizer" when
// empty: tokenizerJSON then found it beside the teacher or used the embedded one).
func tokenizerName(p string) string {
	if p == "" {
		return "the model's tokenizer"
	}
	return p
}

// bpwMissWarning says on stderr when the compressed model's bits per weight miss the
// --bpw target by more than 10 % (ranks are whole, at least 8 and at most full rank, so very
// small or very large targets cannot be met).
func bpwMissWarning(target, got float64) {
	if math.Abs(got-target) > 0.1*target {
		fmt.Fprintf(os.Stderr, "nvg: warning: the student has %.4f bits/weight, not the --bpw %g asked for (ranks are whole, at least 8 and at most the matrix's full rank)\n", got, target)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// tokenizerJSON finds the tokenizer.json for a model: explicit file if given, else beside
// the model (in an HF or sharded-CMF directory, or in the directory of a .cmf file), else
// the embedded tiny teacher's when the model is the embedded default or has its
// architecture (cfg, when not nil, equal to the tiny teacher's: a student compressed from
// it, such as `nvg compress` and `nvg distill` write).
func tokenizerJSON(explicit, modelPath string, cfg *arch.Config) ([]byte, error) {
	if explicit != "" {
		if !exists(explicit) {
			return nil, usagef("tokenizer %s: no such file", explicit)
		}
		if st, _ := os.Stat(explicit); st.IsDir() {
			p := filepath.Join(explicit, "tokenizer.json")
			if fi, err := os.Stat(p); err != nil || fi.IsDir() {
				return nil, usagef("tokenizer %s is a directory, and it holds no tokenizer.json file", explicit)
			}
			explicit = p
		}
		return os.ReadFile(explicit)
	}
	if modelPath == "" {
		return tinyteacher.TokenizerJSON(), nil
	}
	dir := modelPath
	if st, err := os.Stat(modelPath); err == nil && !st.IsDir() {
		dir = filepath.Dir(modelPath)
	}
	p := filepath.Join(dir, "tokenizer.json")
	if !exists(p) {
		if cfg != nil && sameArchAsTinyTeacher(*cfg) {
			fmt.Fprintf(os.Stderr, "note: no tokenizer.json beside %s; using the %s tokenizer (same architecture)\n", modelPath, defaultModelName)
			return tinyteacher.TokenizerJSON(), nil
		}
		return nil, usagef("no tokenizer.json beside model %s: pass --tokenizer FILE", modelPath)
	}
	return os.ReadFile(p)
}

// sameArchAsTinyTeacher reports whether cfg is the embedded tiny teacher's architecture.
func sameArchAsTinyTeacher(cfg arch.Config) bool {
	tiny, err := tinyteacher.Open()
	if err != nil {
		return false
	}
	defer tiny.Close()
	return reflect.DeepEqual(tiny.Config, cfg)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
