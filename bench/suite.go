package bench

import (
	"fmt"
	"runtime"
	"time"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/internal/version"
)

// Suite is a measuring run of nvg bench beyond one geometry's Options: which teacher
// dtypes each geometry is measured with, whether their gap to f16 is measured first, and
// where the report goes.
type Suite struct {
	// DTypes are the teacher projection formats measured per geometry (TeacherDTypes; nil:
	// {"f16"}); the student step runs with the first only (Options.TeacherOnly for the rest).
	DTypes []string
	// Gap measures, before a geometry, each 8-bit dtype's TeacherGaps against f16 (on NB
	// windows of T+1 random tokens) and prints it; the results carry it (Result.TeacherGap).
	Gap bool
	// JSON is the file the report is written to after every result (WriteJSON; "": none).
	JSON string
}

// NewReport starts the report of a measuring run of o on dev: the device, its driver,
// backend and tensor cores, the date (UTC), the command line, the Go version, the build and
// o's ceilings.
func NewReport(dev *gpu.Device, o *Options, command string) *Report {
	in := dev.Info()
	return &Report{Device: in.Name, Driver: in.Description, Backend: in.Backend, CPU: in.CPU,
		Date: time.Now().UTC().Format(time.RFC3339), Command: command, GoVersion: runtime.Version(),
		Build: version.Get().String(), PeakTFLOPs: o.PeakTF, PeakGBps: o.PeakGB, PeakTensorTFLOPs: o.PeakTensorTF,
		TensorCores: dev.TensorCores().String()}
}

// Run measures every geometry of o.Models on dev with every dtype of s and every GEMM path
// of o.TensorCoresModes (Measure; after o.Deadline a result says it was skipped), sums each
// over the ranks (SumRanks), prints every failure on o.Stdout, appends the results to rep
// and rewrites s.JSON after each. It fails when a gap, a rank sum or the JSON fails, or when
// every result failed.
func (s Suite) Run(dev *gpu.Device, o Options, rep *Report) error {
	failed, dtypes := 0, s.DTypes
	if dtypes == nil {
		dtypes = []string{"f16"}
	}
	for _, name := range o.Models {
		gaps, err := s.gaps(dev, o, name)
		if err != nil {
			return err
		}
		for i, dt := range dtypes { // the student step with the first teacher dtype only
			for _, mode := range o.TensorCoresModes() {
				od := o
				od.TeacherDType, od.TeacherOnly = dt, i > 0
				res := Result{Geom: name, NB: o.NB, T: o.T, K: o.K, Tokens: o.NB * o.T, TeacherDType: dt, Error: "skipped: the --deadline passed"}
				if o.Deadline.IsZero() || time.Until(o.Deadline) > 0 {
					res = Measure(dev, name, mode, od)
				}
				if g, ok := gaps[dt]; ok {
					res.TeacherGap = &g
				}
				if err := o.SumRanks(&res); err != nil {
					return err
				}
				if res.Error != "" {
					failed++
					fmt.Fprintf(o.Stdout, "%s (teacher %s, tensor cores %s): FAILED: %s\n\n", name, dt, mode, res.Error)
				}
				rep.Results = append(rep.Results, res)
				if s.JSON != "" {
					if err := WriteJSON(s.JSON, rep); err != nil {
						return err
					}
				}
			}
		}
	}
	if failed == len(rep.Results) {
		return fmt.Errorf("every geometry failed (%d)", failed)
	}
	return nil
}

// gaps measures, with s.Gap, what each 8-bit dtype costs geometry name's synthetic teacher
// (TeacherGaps over o.NB windows of o.T+1 random tokens, top-o.K) and prints it on
// o.Stdout; nil without it.
func (s Suite) gaps(dev *gpu.Device, o Options, name string) (map[string]Gap, error) {
	if !s.Gap {
		return nil, nil
	}
	cfg, err := Config(name)
	if err != nil {
		return nil, err
	}
	gaps, err := TeacherGaps(dev, cfg, s.DTypes, o.NB, o.T, o.K, o.NB, uint32(o.Seed))
	if err != nil {
		return nil, fmt.Errorf("%s: --teacher-gap: %w", name, err)
	}
	for _, dt := range s.DTypes {
		if g, ok := gaps[dt]; ok {
			fmt.Fprintf(o.Stdout, "%s %s teacher against f16 (random weights and tokens, %d tokens): top-%d KL %.4g nats, top-1 agreement %.2f %%, NLL %.4f (f16 %.4f)\n",
				name, dt, g.Tokens, g.K, g.TopKKL, 100*g.Top1, g.NLL, g.RefNLL)
		}
	}
	return gaps, nil
}
