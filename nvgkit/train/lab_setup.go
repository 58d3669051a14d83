package train

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/nvg-project/nvg/nvgkit/session"
)

// labRunSetup is the run Setup of a Lab's session.Setup: every field of session.Setup but
// Replace and Train is the field of the same name of Setup, and every field of session.Train
// the field of the same name of TrainConfig, on DefaultTrainConfig (so a setting added to
// both under one name reaches Assemble with no code here). A Lab never evaluates between
// steps unless asked (EvalEvery 0), never restores a best snapshot itself (KeepFinal) and
// writes no output directory. Errors: a field without its counterpart (a setting added to
// one type and not the other; TestLabSetupFieldsMapped keeps them in step).
func labRunSetup(s session.Setup) (Setup, error) {
	out := Setup{Train: DefaultTrainConfig()}
	if err := copyFields(reflect.ValueOf(&out).Elem(), reflect.ValueOf(s), "Replace", "Train"); err != nil {
		return Setup{}, err
	}
	if err := copyFields(reflect.ValueOf(&out.Train).Elem(), reflect.ValueOf(s.Train)); err != nil {
		return Setup{}, err
	}
	out.Train.EvalEvery, out.Train.KeepFinal = 0, true
	return out, nil
}

// copyFields sets every field of the struct dst to the field of the same name of the struct
// src (converted: a struct of the same fields converts), but those named in skip.
func copyFields(dst, src reflect.Value, skip ...string) error {
	for i := range src.NumField() {
		name := src.Type().Field(i).Name
		if slices.Contains(skip, name) {
			continue
		}
		f := dst.FieldByName(name)
		if !f.IsValid() || !src.Field(i).Type().ConvertibleTo(f.Type()) {
			return fmt.Errorf("train: %s.%s has no field of that name and kind in %s", src.Type(), name, dst.Type())
		}
		f.Set(src.Field(i).Convert(f.Type()))
	}
	return nil
}
