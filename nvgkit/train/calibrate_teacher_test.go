package train_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// TestCalibrateTeacher: nvg compress's calibration pass is the composition its doc names —
// the Setup's tokenizer, its training files' training split, the teacher net and Calibrate
// with the Setup's calibration and seed — to the bit, says its size through note before it
// starts, and refuses missing training files (an InputError) and a calibration out of range.
func TestCalibrateTeacher(t *testing.T) {
	d, _, _ := kittest.TinyTeacher(t)
	t.Setenv("NVG_CACHE", t.TempDir())
	s := refineSetup(t, t.TempDir())
	teacher, err := cmf.Open(s.Teacher)
	if err != nil {
		t.Fatal(err)
	}
	defer teacher.Close()
	var notes []string
	note := func(f string, a ...any) { notes = append(notes, f) }
	got, err := train.CalibrateTeacher(context.Background(), d, teacher, s, note, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := train.OpenTokenizer(s.Tokenizer, s.Teacher, teacher.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	corpus, err := data.FilesCorpus(s.TrainFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := corpus.Tokens(tok, data.Train, "")
	if err != nil {
		t.Fatal(err)
	}
	net, err := nvgkit.LoadNet(d, teacher, nvgkit.Teacher)
	if err != nil {
		t.Fatal(err)
	}
	defer net.Release()
	want, err := train.Calibrate(context.Background(), net, ids, s.Calibration, s.Train.Seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || len(got.Names()) == 0 || got.Tokens(got.Names()[0]) != 3*32 {
		t.Errorf("CalibrateTeacher: %d inputs (%d tokens), not Calibrate's %d", len(got.Names()), got.Tokens(got.Names()[0]), len(want.Names()))
	}
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "calibration: %d windows × %d tokens") {
		t.Errorf("notes %q", notes)
	}
	bad := s
	bad.TrainFiles = []string{"no/such/dir/*.go"}
	var ie *train.InputError
	if _, err := train.CalibrateTeacher(context.Background(), d, teacher, bad, nil, nil); !errors.As(err, &ie) || !strings.Contains(err.Error(), "TrainFiles") {
		t.Errorf("missing training files: %v", err)
	}
	bad = s
	bad.Calibration.T = -1
	if _, err := train.CalibrateTeacher(context.Background(), d, teacher, bad, nil, nil); err == nil || !strings.Contains(err.Error(), "Calibration.T = -1") {
		t.Errorf("Calibration.T -1: %v", err)
	}
}
