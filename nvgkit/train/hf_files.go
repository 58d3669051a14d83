package train

import (
	"os"
	"path/filepath"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
)

// HFFiles are the files an HF export of a model takes from beside it (ExportFiles): the
// tokenizer.json, the tokenizer_config.json beside that, and a config.json whose fields
// beyond the architecture the export keeps (cmf.ExportHFOptions), each with where it came
// from for a summary.
type HFFiles struct {
	Tokenizer, TokenizerConfig, Config []byte // nil: none
	TokenizerFrom, ConfigFrom          string // a path, or "embedded qwen35-tiny-go (same architecture)"
}

// ExportFiles finds the files of an HF export of the model at modelPath (architecture cfg):
// tokenizer.json from explicit (a file, or a directory holding one: TokenizerJSON) when
// given, else beside the model (in its directory, or in the directory of a model file); the
// tokenizer_config.json beside that tokenizer; a config.json of the same architecture beside
// the model (one of another architecture is ignored, saying so through note when it is not
// nil). For a model of the default model's architecture (IsDefaultArchitecture) the missing
// ones come from the default model. Errors (*InputError): an explicit tokenizer that is
// missing, no tokenizer at all; a file that cannot be read.
func ExportFiles(explicit, modelPath string, cfg arch.Config, note func(format string, a ...any)) (HFFiles, error) {
	var s HFFiles
	dir := modelPath
	if st, err := os.Stat(modelPath); err == nil && !st.IsDir() {
		dir = filepath.Dir(modelPath)
	}
	tokDir := dir
	var err error
	if explicit != "" {
		if s.Tokenizer, err = TokenizerJSON(explicit, "", nil, note); err != nil {
			return s, err
		}
		s.TokenizerFrom, tokDir = explicit, explicit
		if st, err := os.Stat(explicit); err == nil && !st.IsDir() {
			tokDir = filepath.Dir(explicit)
		}
	} else if p := filepath.Join(dir, cmf.HFTokenizerName); exists(p) {
		if s.Tokenizer, err = os.ReadFile(p); err != nil {
			return s, err
		}
		s.TokenizerFrom = p
	}
	if p := filepath.Join(tokDir, cmf.HFTokenizerConfigName); s.Tokenizer != nil && exists(p) {
		if s.TokenizerConfig, err = os.ReadFile(p); err != nil {
			return s, err
		}
	}
	if p := filepath.Join(dir, cmf.HFConfigName); exists(p) {
		if b, err := os.ReadFile(p); err == nil {
			if _, err := cmf.HFConfigJSON(cfg, b, 0); err == nil {
				s.Config, s.ConfigFrom = b, p
			} else if note != nil {
				note("note: ignoring %s: %v", p, err)
			}
		}
	}
	if IsDefaultArchitecture(cfg) {
		read := func(name string) []byte {
			b, _ := DefaultModelFile(name)
			return b
		}
		if s.Tokenizer == nil {
			s.Tokenizer, s.TokenizerConfig, s.TokenizerFrom = read(cmf.HFTokenizerName), read(cmf.HFTokenizerConfigName), DefaultModelName+" (same architecture)"
		}
		if s.Config == nil {
			s.Config, s.ConfigFrom = read(cmf.HFConfigName), DefaultModelName+" (same architecture)"
		}
	}
	if s.Tokenizer == nil {
		return s, inputf("no tokenizer.json beside %s: pass --tokenizer FILE", modelPath)
	}
	return s, nil
}
