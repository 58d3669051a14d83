package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
)

const tinyTeacherDir = "../../cmf/tinyteacher/model"

func TestExportUsageErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for _, args := range [][]string{
		{"export", tinyTeacherDir},                // no --hf
		{"export", "--hf", out},                   // no STUDENT
		{"export", "--hf", out, "a.cmf", "b.cmf"}, // two students
		{"export", "--hf", out, filepath.Join(dir, "missing.cmf")},
		{"export", "--hf", out, "--max-shard-bytes", "-1", tinyTeacherDir},
		{"export", "--hf", out, "--tokenizer", filepath.Join(dir, "missing.json"), tinyTeacherDir},
	} {
		if code := run(args); code != 2 {
			t.Errorf("nvg %v: exit %d, want 2", args, code)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed call created the output directory")
	}
}

// TestExportHFDirRoundTrip exports the tiny teacher's HF directory (no BLR tensors, so the
// export must reproduce its tensors byte for byte) and checks that config.json keeps every
// value of the source's config.json and the tokenizer files are copied.
func TestExportHFDirRoundTrip(t *testing.T) {
	out := filepath.Join(t.TempDir(), "hf")
	if code := run([]string{"export", "--hf", out, tinyTeacherDir}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// A second export into the now non-empty directory is refused unless --force: nothing
	// the user has there is overwritten by accident.
	if code := run([]string{"export", "--hf", out, tinyTeacherDir}); code != 2 {
		t.Fatalf("export into a non-empty directory: exit %d, want 2", code)
	}
	if code := run([]string{"export", "--hf", out, "--force", tinyTeacherDir}); code != 0 {
		t.Fatalf("export --force into the earlier export: exit %d", code)
	}
	src, err := cmf.Open(tinyTeacherDir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	got, err := cmf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if !reflect.DeepEqual(src.Names(), got.Names()) || !reflect.DeepEqual(src.Config, got.Config) {
		t.Fatal("exported names or config differ from the source")
	}
	for _, n := range src.Names() {
		a, _ := src.Tensors[n].Bytes()
		b, _ := got.Tensors[n].Bytes()
		if !bytes.Equal(a, b) || src.Tensors[n].DType != got.Tensors[n].DType {
			t.Fatalf("%s differs", n)
		}
	}
	var ref, cfg map[string]any
	rb, _ := os.ReadFile(filepath.Join(tinyTeacherDir, "config.json"))
	cb, _ := os.ReadFile(filepath.Join(out, "config.json"))
	json.Unmarshal(rb, &ref)
	json.Unmarshal(cb, &cfg)
	for k, v := range ref {
		if k != "transformers_version" && !reflect.DeepEqual(cfg[k], v) {
			t.Errorf("config.json %s = %v, want %v", k, cfg[k], v)
		}
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		a, _ := os.ReadFile(filepath.Join(tinyTeacherDir, f))
		b, _ := os.ReadFile(filepath.Join(out, f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s not copied", f)
		}
	}
}

// TestExportCMFUsesEmbeddedTokenizer exports a .cmf of the tiny teacher's architecture with
// no tokenizer beside it: the embedded teacher's tokenizer files and config fields are used.
func TestExportCMFUsesEmbeddedTokenizer(t *testing.T) {
	dir := t.TempDir()
	src, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	stud := filepath.Join(dir, "s.cmf")
	if err := cmf.WriteCMF(stud, src); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "hf")
	if code := run([]string{"export", "--hf", out, "--max-position-embeddings", "2048", stud}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	tok, _ := os.ReadFile(filepath.Join(out, "tokenizer.json"))
	if !bytes.Equal(tok, tinyteacher.TokenizerJSON()) {
		t.Error("tokenizer.json is not the embedded teacher's")
	}
	var cfg map[string]any
	cb, _ := os.ReadFile(filepath.Join(out, "config.json"))
	json.Unmarshal(cb, &cfg)
	if cfg["max_position_embeddings"] != 2048.0 || cfg["pad_token_id"] != 0.0 {
		t.Errorf("config.json: max_position_embeddings %v, pad_token_id %v", cfg["max_position_embeddings"], cfg["pad_token_id"])
	}
	// A student of another architecture without a tokenizer is a usage error.
	other := src.Config
	other.VocabSize = 4096
	m := cmf.NewModel(other)
	for _, n := range src.Names() {
		tt := src.Tensors[n]
		if n == "model.embed_tokens.weight" {
			raw, _ := tt.Bytes()
			tt, _ = cmf.NewTensor(n, tt.DType, []int{4096, 256}, raw[:4096*256*2])
		}
		if err := m.Set(tt); err != nil {
			t.Fatal(err)
		}
	}
	stud2 := filepath.Join(dir, "other", "s.cmf")
	os.MkdirAll(filepath.Dir(stud2), 0o755)
	if err := cmf.WriteCMF(stud2, m); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"export", "--hf", filepath.Join(dir, "hf2"), stud2}); code != 2 {
		t.Errorf("other architecture without tokenizer: exit %d, want 2", code)
	}
}
