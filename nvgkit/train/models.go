package train

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/nvgkit/tokenizer"
)

// This file is the one place where nvg chooses its default model, the embedded tiny teacher
// qwen35-tiny-go (cmf/tinyteacher): the teacher of a run that names none, its tokenizer, and
// the tokenizer and config of a student of its architecture. No other production package
// imports cmf/tinyteacher.

// DefaultModelName names the embedded default teacher in output and reports.
const DefaultModelName = "embedded qwen35-tiny-go"

// ModelName is the name to print for a model path: the path, or DefaultModelName for "".
func ModelName(path string) string {
	if path == "" {
		return DefaultModelName
	}
	return path
}

// InputError is an error in what a run was asked to use — a model, tokenizer, corpus or
// checkpoint path that is missing or is not what it must be — naming the path and what to
// give instead. It is the caller's to fix: nvg exits 2 on one, as on a bad flag.
type InputError struct {
	Msg string
	Err error // the error it wraps (cmf.ErrNotSafetensors, …), or nil
}

func (e *InputError) Error() string { return e.Msg }

// Unwrap returns the error the InputError wraps (nil for none).
func (e *InputError) Unwrap() error { return e.Err }

// inputf is an *InputError of the formatted message.
func inputf(format string, a ...any) error { return &InputError{Msg: fmt.Sprintf(format, a...)} }

// OpenModel opens the model at path — an HF checkpoint directory, a .cmf or .safetensors file,
// or a sharded CMF directory — or, when path is "", the embedded default teacher. Errors: a
// path that does not exist, a directory with neither an HF config.json nor a CMF index, a
// text file given as a model, or a file cmf.Open finds is not a model file at all
// (cmf.ErrNotSafetensors, wrapped) — each an *InputError naming the path; cmf.Open's.
func OpenModel(path string) (*cmf.Model, error) {
	if path == "" {
		return tinyteacher.Open()
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, inputf("model %s: no such file or directory", path)
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
					return nil, inputf("model %s: %s is a directory, not a file", path, p)
				}
				found = true
			}
		}
		if !found {
			return nil, inputf("model %s: directory has no %s (not an HF checkpoint) and no %s or %s (not a CMF model)",
				path, cmf.HFConfigName, cmf.CMFIndexName, cmf.CMFFileName)
		}
	}
	if !st.IsDir() && isTextFile(path) {
		hint := ""
		if d := filepath.Dir(path); exists(filepath.Join(d, cmf.HFConfigName)) {
			hint = fmt.Sprintf(" (for the checkpoint it belongs to, give its directory: %s)", d)
		}
		return nil, inputf("model %s is a text file, not a model: want an HF checkpoint directory, a .cmf or .safetensors file, or a sharded CMF directory%s", path, hint)
	}
	m, err := cmf.Open(path)
	if errors.Is(err, cmf.ErrNotSafetensors) { // a file that is no model at all (a README in UTF-8): the caller's to fix
		return nil, &InputError{Msg: err.Error(), Err: err}
	}
	return m, err
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

// exists reports whether something is at path.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// DefaultModelConfig returns the embedded default teacher's architecture (nvg bench's "tiny"
// geometry).
func DefaultModelConfig() (arch.Config, error) {
	raw, err := DefaultModelFile(cmf.HFConfigName)
	if err != nil {
		return arch.Config{}, err
	}
	return arch.ParseConfig(raw)
}

// IsDefaultArchitecture reports whether cfg is the embedded default teacher's architecture:
// a student compressed from it (as nvg compress and nvg distill write one) then uses its
// tokenizer and config.
func IsDefaultArchitecture(cfg arch.Config) bool {
	tiny, err := tinyteacher.Open()
	if err != nil {
		return false
	}
	defer tiny.Close()
	return reflect.DeepEqual(tiny.Config, cfg)
}

// DefaultModelFile returns a file of the embedded default teacher's HF directory by name
// (config.json, tokenizer.json, tokenizer_config.json, MODEL_CARD.md, …).
func DefaultModelFile(name string) ([]byte, error) {
	return fs.ReadFile(tinyteacher.FS(), name)
}

// TokenizerJSON finds the tokenizer.json of a run: the explicit file (or a directory holding
// tokenizer.json) when given; else the one beside the model at modelPath (in its directory,
// or in the directory of a model file); else the embedded default teacher's for the default
// model ("") or for a model of its architecture (cfg, when not nil), saying so through note
// when the model is not the default. Errors (*InputError): an explicit file that is missing,
// a directory without tokenizer.json, a model without one beside it.
func TokenizerJSON(explicit, modelPath string, cfg *arch.Config, note func(format string, a ...any)) ([]byte, error) {
	if explicit != "" {
		st, err := os.Stat(explicit)
		if err != nil {
			return nil, inputf("tokenizer %s: no such file", explicit)
		}
		if st.IsDir() {
			p := filepath.Join(explicit, cmf.HFTokenizerName)
			if fi, err := os.Stat(p); err != nil || fi.IsDir() {
				return nil, inputf("tokenizer %s is a directory, and it holds no tokenizer.json file", explicit)
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
	p := filepath.Join(dir, cmf.HFTokenizerName)
	if !exists(p) {
		if cfg != nil && IsDefaultArchitecture(*cfg) {
			if note != nil {
				note("note: no tokenizer.json beside %s; using the %s tokenizer (same architecture)", modelPath, DefaultModelName)
			}
			return tinyteacher.TokenizerJSON(), nil
		}
		return nil, inputf("no tokenizer.json beside model %s: pass --tokenizer FILE", modelPath)
	}
	return os.ReadFile(p)
}

// OpenTokenizer returns the tokenizer of the model at modelPath, of architecture cfg: the one
// TokenizerJSON finds (explicit, else beside the model, else the default's), which must fit
// cfg's vocabulary. Errors: TokenizerJSON's, a malformed tokenizer.json (naming it), a
// tokenizer larger than the vocabulary.
func OpenTokenizer(explicit, modelPath string, cfg arch.Config, note func(format string, a ...any)) (*tokenizer.Tokenizer, error) {
	raw, err := TokenizerJSON(explicit, modelPath, &cfg, note)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.FromJSON(raw)
	if err != nil {
		name := explicit
		if name == "" {
			name = "the model's tokenizer"
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if n := tok.VocabSize(); n > cfg.VocabSize {
		return nil, fmt.Errorf("tokenizer has %d tokens but the model's vocab_size is %d", n, cfg.VocabSize)
	}
	return tok, nil
}
