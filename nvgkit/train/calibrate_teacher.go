package train

import (
	"context"
	"fmt"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/data"
)

// CalibrateTeacher runs the calibration pass of Init "refine" outside a run (nvg compress
// --init refine), with the settings of s a run of the same teacher would use: the tokenizer
// (s.Tokenizer, else beside s.Teacher: OpenTokenizer), the training split of s.TrainFiles
// (nil: the Go standard library's) through the token cache (TokenCacheDir), teacher (the
// model at s.Teacher) loaded on dev as a Teacher net and released at the end, and Calibrate
// with s.Calibration and s.Train.Seed. note, when not nil, gets the pass's size before it
// starts; progress the windows done. The statistics are what Assemble's compression of the
// same settings gets. Errors: s.Calibration out of range, the tokenizer's, the corpus's (an
// *InputError naming TrainFiles), LoadNet's and Calibrate's.
func CalibrateTeacher(ctx context.Context, dev *gpu.Device, teacher *cmf.Model, s Setup, note func(format string, a ...any), progress func(done, total int)) (*compress.Calibration, error) {
	if err := s.Calibration.Validate(); err != nil {
		return nil, err
	}
	tok, err := OpenTokenizer(s.Tokenizer, s.Teacher, teacher.Config, note)
	if err != nil {
		return nil, err
	}
	files := s.TrainFiles
	if files != nil {
		if files, err = data.ExpandSources(files); err != nil {
			return nil, inputf("TrainFiles: %v", err)
		}
	}
	corpus, err := data.OpenCorpus(files, nil)
	if err != nil {
		return nil, err
	}
	ids, err := corpus.Tokens(tok, data.Train, TokenCacheDir())
	if err != nil {
		return nil, fmt.Errorf("calibration text: %w", err)
	}
	net, err := nvgkit.LoadNet(dev, teacher, nvgkit.Teacher)
	if err != nil {
		return nil, err
	}
	defer net.Release()
	c := s.Calibration.Resolved()
	if note != nil {
		note("calibration: %d windows × %d tokens of the training text through the teacher on %s, Grams of inputs of at most %d features", c.Windows, c.T, dev.Info().Name, c.GramMax)
	}
	return Calibrate(ctx, net, ids, c, s.Train.Seed, progress)
}
