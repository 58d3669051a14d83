package train

import (
	"reflect"
	"slices"
	"testing"

	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/session"
)

// TestLabSetupFieldsMapped: every setting of a session.Setup reaches the run's Setup under
// its own name (a field added to one and not the other fails here), with values: a Setup
// whose every field differs from DefaultSetup's maps onto the same values, and the Lab's
// own choices (no evaluation between steps, no best-snapshot restore) are set.
func TestLabSetupFieldsMapped(t *testing.T) {
	check := func(src, dst reflect.Type, skip ...string) {
		for i := range src.NumField() {
			f := src.Field(i)
			if slices.Contains(skip, f.Name) {
				continue
			}
			g, ok := dst.FieldByName(f.Name)
			if !ok || !f.Type.ConvertibleTo(g.Type) {
				t.Errorf("%s.%s (%s) has no field of that name and kind in %s", src, f.Name, f.Type, dst)
			}
		}
	}
	check(reflect.TypeOf(session.Setup{}), reflect.TypeOf(Setup{}), "Replace", "Train")
	check(reflect.TypeOf(session.Train{}), reflect.TypeOf(TrainConfig{}))

	s := session.Setup{Teacher: "t", Tokenizer: "tok.json", Student: "s.cmf", BitsPerWeight: 1.5, Paths: "2",
		TrainFiles: []string{"a.go"}, EvalFiles: []string{"b.go"}, Resume: "ck", Replace: true,
		Train: session.Train{Steps: 5, NB: 2, T: 8, Windows: 4, K: 3, LR: 0.01, Warmup: 1, MinLRFrac: 0.2, ClipNorm: 2, EvalWindows: 3,
			Seed: 9, ScheduleSteps: 7, KeepActivations: true, ActivationBudget: 5, TrainSigns: true,
			Signs:      session.SignConfig{Alpha: 2, Beta: 0.5, Tau: 9, MaxFlipFrac: 0.01, Seed: 4},
			HiddenLoss: "cosine", HiddenWeight: 0.3, HiddenLayers: "every:2"}}
	got, err := labRunSetup(s)
	if err != nil {
		t.Fatal(err)
	}
	want := Setup{Teacher: "t", Tokenizer: "tok.json", Student: "s.cmf", BitsPerWeight: 1.5, Paths: "2",
		TrainFiles: []string{"a.go"}, EvalFiles: []string{"b.go"}, Resume: "ck", Train: DefaultTrainConfig()}
	c := &want.Train
	c.Steps, c.NB, c.T, c.Windows, c.K, c.EvalWindows, c.Seed, c.ScheduleSteps = 5, 2, 8, 4, 3, 3, 9, 7
	c.LR, c.Warmup, c.MinLRFrac, c.ClipNorm = 0.01, 1, 0.2, 2
	c.KeepActivations, c.ActivationBudget, c.TrainSigns = true, 5, true
	c.Signs = nvgkit.SignConfig{Alpha: 2, Beta: 0.5, Tau: 9, MaxFlipFrac: 0.01, Seed: 4}
	c.HiddenLoss, c.HiddenWeight, c.HiddenLayers = "cosine", 0.3, "every:2"
	c.EvalEvery, c.KeepFinal = 0, true
	if !reflect.DeepEqual(got, want) {
		t.Errorf("labRunSetup:\n got %+v\nwant %+v", got, want)
	}
	// DefaultSetup is nvg distill's run (one table of defaults) but for the Lab's choices.
	d, err := labRunSetup(session.DefaultSetup())
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultTrainConfig()
	def.EvalEvery, def.KeepFinal = 0, true
	if d.Train != def || d.BitsPerWeight != 1 || d.Paths != "auto" || d.Teacher != "" {
		t.Errorf("DefaultSetup maps to %+v, want DefaultTrainConfig less evaluations and with KeepFinal, 1 bit/weight, paths auto", d)
	}
}
