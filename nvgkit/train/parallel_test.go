package train_test

import (
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit/train"
	"github.com/nvg-project/nvg/testkit/kittest"
)

// twoRanks is a Comm that claims 2 ranks (NewTrainer's split check needs no collective).
type twoRanks struct{ train.SingleProcess }

func (twoRanks) Size() int { return 2 }

// NB must split evenly over ranks × micro-batches: NewTrainer says so, naming NB and the
// multiple it needs, before allocating anything.
func TestTrainerSplitNB(t *testing.T) {
	d, teacher, sm, trainIDs, heldOut := trainFixture(t)
	student := kittest.LoadStudent(t, d, sm)
	cfg := train.TrainConfig{Steps: 1, NB: 3, T: 8, K: 8, EvalWindows: 1, Seed: 3, Settings: schedule(0.01, 1, 0.1, 1)}
	for _, opts := range [][]train.Option{{train.WithMicroBatches(2)}, {train.WithComm(twoRanks{})}} {
		tr, err := train.NewTrainer(teacher, student, trainIDs, heldOut, cfg, opts...)
		if err == nil {
			tr.Close()
			t.Fatal("NB = 3 over 2 parts accepted")
		}
		if !strings.Contains(err.Error(), "NB = 3") || !strings.Contains(err.Error(), "multiple of 2") {
			t.Errorf("error %q does not name NB = 3 and the multiple of 2", err)
		}
	}
}
