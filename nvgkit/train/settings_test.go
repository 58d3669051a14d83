package train

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit"
)

// mutate changes the value v (a settable field of a Setup or TrainConfig) to another one of
// its type. ok is false for a kind it cannot change.
func mutate(v reflect.Value) (ok bool) {
	switch v.Kind() {
	case reflect.String:
		if v.String() == "auto" { // Paths
			v.SetString("1")
		} else {
			v.SetString(v.String() + "/elsewhere")
		}
	case reflect.Int, reflect.Int64: // + NB: Windows stays a multiple of it
		v.SetInt(v.Int() + 4)
	case reflect.Uint64, reflect.Uint32:
		v.SetUint(v.Uint() + 1)
	case reflect.Float64, reflect.Float32: // Adam's betas stay below 1
		switch x := v.Float(); {
		case x == 0:
			v.SetFloat(0.25)
		case x < 1:
			v.SetFloat(x / 2)
		default:
			v.SetFloat(2 * x)
		}
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.ValueOf("another.go")))
	case reflect.Struct: // the sign knobs: change their first field
		return v.NumField() > 0 && mutate(v.Field(0))
	default:
		return false
	}
	return true
}

// field returns the field of the struct s (a pointer) at the Go path p ("Train.Seed", "LR").
func field(s reflect.Value, p string) reflect.Value {
	v := s.Elem()
	for _, name := range strings.Split(p, ".") {
		v = v.FieldByName(name)
	}
	return v
}

// A resume compares every setting a checkpoint records with the run's before any work, and
// names the first that differs (issue 34: a checkpoint of another --bpw was accepted, and a
// seed mismatch said only "the checkpoint's settings … differ"). Every field of Setup and of
// TrainConfig is tried in turn — those added later too — against distill.json
// (LoadResumePoint) and against a Setup (Assemble with Setup.Resume, before any phase): each
// compared one is refused naming it, each a resume may change is accepted.
func TestResumeComparesEverySetting(t *testing.T) {
	base := Setup{Teacher: "/models/teacher", Tokenizer: "/models/tokenizer.json", TrainFiles: []string{"/c/a.go"}, EvalFiles: []string{"/c/b.go"},
		BitsPerWeight: 1, Paths: "auto", Train: DefaultTrainConfig()}
	// Windows given: Steps (which a resume may extend) does not change them. TrainSigns on, so
	// that a changed FinishSteps is a valid one.
	base.Train.OutDir, base.Train.Windows, base.Train.TrainSigns = "/runs/a", 96, true
	dir := t.TempDir()
	path := filepath.Join(dir, CheckpointName(2))
	ck := &Checkpoint{Meta: CheckpointMeta{Version: ckptVersion, Step: 2, Config: base.Train.Resolved(), Setup: settingsRecord(base)},
		Tensors: map[string][]float32{}}
	if err := ck.Save(path); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadResumePoint(dir, base, nil); err != nil {
		t.Fatalf("the run's own settings: %v", err)
	}
	// BlockLayers is the student's layer count, which NewTrainer sets and checks: never compared.
	freeCLI := map[string]bool{"Train.OutDir": true, "Train.TopKFile": true, "Train.Steps": true, "Train.ScheduleSteps": true, "Train.FinishSteps": true,
		"Train.Keep": true, "Train.KeepActivations": true, "Train.ActivationBudget": true, "Train.BlockLayers": true}
	freeLab := map[string]bool{"Train.OutDir": true, "Train.TopKFile": true, "Train.Keep": true, "Train.EvalEvery": true, "Train.CheckpointEvery": true,
		"Train.KeepFinal": true, "Train.KeepActivations": true, "Train.ActivationBudget": true, "Train.BlockLayers": true}
	// Settings of a few values: changed to another valid one (a Setup with an invalid one is
	// refused for that before it is compared).
	valid := map[string]func(s *Setup){
		"Init":             func(s *Setup) { s.Init = "refine" },
		"Calibration":      func(s *Setup) { s.Calibration = CalibrationConfig{Windows: 4, T: 32, GramMax: 64} },
		"Train.HiddenLoss": func(s *Setup) { s.Train.HiddenLoss = "cosine" },
		"Train.Signs": func(s *Setup) {
			s.Train.Signs = nvgkit.SignConfig{Alpha: 2, Beta: 0.9, Tau: 32, MaxFlipFrac: 1e-3, Seed: 1}
		},
	}
	fields := append(jsonFields(reflect.TypeOf(base), "", ""), jsonFields(reflect.TypeOf(base.Train), "config.", "Train.")...)
	compared := 0
	for _, f := range fields {
		if f.key == "config" {
			continue
		}
		s := base
		s.TrainFiles, s.EvalFiles = append([]string(nil), base.TrainFiles...), append([]string(nil), base.EvalFiles...)
		if set, ok := valid[f.goPath]; ok {
			set(&s)
		} else if !mutate(field(reflect.ValueOf(&s), f.goPath)) {
			t.Errorf("%s: the test cannot change a %v", f.goPath, field(reflect.ValueOf(&s), f.goPath).Kind())
			continue
		}
		for _, c := range []struct {
			what  string
			free  map[string]bool
			check func() error
		}{
			{"distill.json", freeCLI, func() error { _, err := LoadResumePoint(dir, s, nil); return err }},
			{"a Setup", freeLab, func() error {
				r := s
				r.Resume = path
				var phases []string
				_, err := Assemble(context.Background(), r, Env{Phase: func(p string) { phases = append(phases, p) }})
				if len(phases) > 0 {
					t.Errorf("%s changed in a Setup: phases %v ran before the settings were compared", f.goPath, phases)
				}
				return err
			}},
		} {
			err := c.check()
			var sm *SettingMismatch
			switch {
			case c.free[f.goPath] && errors.As(err, &sm):
				t.Errorf("%s: %s changed (a resume may change it): %v", c.what, f.goPath, err)
			case !c.free[f.goPath] && (!errors.As(err, &sm) || sm.Setting != f.json || sm.Field != f.goPath || !strings.Contains(err.Error(), path)):
				t.Errorf("%s: %s changed: %v, want a SettingMismatch naming %s and the checkpoint", c.what, f.goPath, err, f.json)
			case !c.free[f.goPath]:
				compared++
			}
		}
	}
	if compared < 2*15 {
		t.Errorf("only %d settings compared", compared)
	}
	// The message names the setting and both values.
	s := base
	s.BitsPerWeight = 2
	_, err := LoadResumePoint(dir, s, nil)
	if want := "was trained with bits_per_weight_target = 1 (Setup.BitsPerWeight), but " + filepath.Join(dir, RunFileName) + " has 2"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("bpw 2: %v, want %q", err, want)
	}
	// A checkpoint of an older nvg records no Setup: its TrainConfig is still compared.
	ck.Meta.Setup = nil
	if err := ck.Save(path); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadResumePoint(dir, s, nil); err != nil {
		t.Errorf("a checkpoint without its Setup: %v", err)
	}
	s.Train.Seed++
	if _, err := LoadResumePoint(dir, s, nil); err == nil || !strings.Contains(err.Error(), "config.seed = 1 (Setup.Train.Seed)") {
		t.Errorf("another seed, a checkpoint without its Setup: %v", err)
	}
}
