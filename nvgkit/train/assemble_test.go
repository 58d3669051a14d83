package train_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit/train"
)

// Assemble checks what it is given before any expensive work (no device is opened here):
// settings out of range name the field; paths that are missing or not what they must be are
// *InputError naming the path (nvg exits 2 on them; a Lab's Setup returns them wrapped).
func TestAssembleInputErrors(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.json")
	if err := os.WriteFile(text, []byte(`{"not": "a model"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	base := train.Setup{BitsPerWeight: 1, Paths: "auto", Train: train.DefaultTrainConfig()}
	for _, c := range []struct {
		what  string
		set   func(*train.Setup)
		input bool
		want  string
	}{
		{"a missing teacher", func(s *train.Setup) { s.Teacher = filepath.Join(dir, "missing") }, true, "missing: no such file or directory"},
		{"a text file as the teacher", func(s *train.Setup) { s.Teacher = text }, true, "is a text file, not a model"},
		{"a directory without a model", func(s *train.Setup) { s.Teacher = dir }, true, "directory has no config.json"},
		{"a missing tokenizer", func(s *train.Setup) { s.Tokenizer = filepath.Join(dir, "tok.json") }, true, "tok.json: no such file"},
		{"a tokenizer directory without tokenizer.json", func(s *train.Setup) { s.Tokenizer = dir }, true, "holds no tokenizer.json"},
		{"a missing corpus file", func(s *train.Setup) {
			s.TrainFiles, s.EvalFiles = []string{filepath.Join(dir, "a.go")}, []string{filepath.Join(dir, "b.go")}
		}, true, "a.go: no such file or directory"},
		{"training files without held-out ones", func(s *train.Setup) { s.TrainFiles = []string{"a.go"} }, false, "go together"},
		{"a bits-per-weight target of 0", func(s *train.Setup) { s.BitsPerWeight = 0 }, false, "BitsPerWeight = 0"},
		{"an unknown path mode", func(s *train.Setup) { s.Paths = "3" }, false, "3"},
		{"a schedule out of range", func(s *train.Setup) { s.Train.Steps = 0 }, false, "Steps = 0"},
	} {
		s := base
		c.set(&s)
		_, err := train.Assemble(context.Background(), s, train.Env{})
		var ie *train.InputError
		if err == nil || errors.As(err, &ie) != c.input || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (an InputError: %v), want one containing %q (an InputError: %v)", c.what, err, errors.As(err, &ie), c.want, c.input)
		}
	}
}
