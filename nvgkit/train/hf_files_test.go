package train_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// TestExportFiles finds an HF export's files: beside an HF directory (its own), beside a .cmf
// (the default model's for its architecture, said so), from an explicit tokenizer directory
// (with the tokenizer_config.json beside it), a config.json of another architecture ignored
// with a note; no tokenizer at all is an InputError.
func TestExportFiles(t *testing.T) {
	const hfDir = "../../cmf/tinyteacher/model"
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg := m.Config
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	f, err := train.ExportFiles("", hfDir, cfg, nil)
	tokPath, cfgPath := filepath.Join(hfDir, cmf.HFTokenizerName), filepath.Join(hfDir, cmf.HFConfigName)
	if err != nil || f.TokenizerFrom != tokPath || f.ConfigFrom != cfgPath || !bytes.Equal(f.Tokenizer, read(tokPath)) ||
		!bytes.Equal(f.TokenizerConfig, read(filepath.Join(hfDir, cmf.HFTokenizerConfigName))) || !bytes.Equal(f.Config, read(cfgPath)) {
		t.Fatalf("HF directory: from %q and %q, %v", f.TokenizerFrom, f.ConfigFrom, err)
	}
	dir := t.TempDir()
	student := filepath.Join(dir, "s.cmf")
	if err := os.WriteFile(student, []byte("not read"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err = train.ExportFiles("", student, cfg, nil)
	const same = train.DefaultModelName + " (same architecture)"
	if err != nil || f.TokenizerFrom != same || f.ConfigFrom != same || !bytes.Equal(f.Tokenizer, tinyteacher.TokenizerJSON()) || f.TokenizerConfig == nil {
		t.Fatalf("a .cmf of the default architecture: from %q and %q, %v", f.TokenizerFrom, f.ConfigFrom, err)
	}
	other := cfg
	other.HiddenSize = 128
	if err := os.WriteFile(filepath.Join(dir, cmf.HFConfigName), read(cfgPath), 0o644); err != nil {
		t.Fatal(err)
	}
	var notes []string
	f, err = train.ExportFiles(hfDir, student, other, func(format string, a ...any) { notes = append(notes, format) })
	if err != nil || f.TokenizerFrom != hfDir || f.TokenizerConfig == nil || f.Config != nil || len(notes) != 1 || !strings.HasPrefix(notes[0], "note: ignoring") {
		t.Fatalf("explicit tokenizer, config of another architecture: %+v, notes %q, %v", f.TokenizerFrom, notes, err)
	}
	var ie *train.InputError
	if _, err := train.ExportFiles("", student, other, nil); !errors.As(err, &ie) || !strings.Contains(err.Error(), "no tokenizer.json beside "+student) {
		t.Errorf("no tokenizer: %v", err)
	}
}
