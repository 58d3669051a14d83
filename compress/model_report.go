package compress

// ModelReport is the report of a whole compression, the JSON `nvg compress --json` writes:
// what was asked, where the randomised SVDs' products ran, the overall bits per weight, and
// the per-tensor reports with their summary by kind. NewModelReport fills what the options
// and reports say; the caller adds the models, the products and the time.
type ModelReport struct {
	Teacher    string         `json:"teacher"` // the teacher's path, or its name
	Output     string         `json:"output"`  // the student file written
	TargetBPW  float64        `json:"target_bits_per_weight"`
	Paths      string         `json:"paths"` // PathMode.String: auto, 1 or 2
	Init       string         `json:"init"`  // Init.String: dual-svid or refine
	Seed       uint64         `json:"seed"`
	Products   string         `json:"products"`         // the large products: cpu-f64, cpu-f32 or gpu-f32
	Device     string         `json:"device,omitempty"` // the GPU adapter of gpu-f32
	OverallBPW float64        `json:"overall_bits_per_weight"`
	Seconds    float64        `json:"seconds"`
	Kinds      []KindSummary  `json:"kinds"`
	Tensors    []TensorReport `json:"tensors"`
}

// NewModelReport is the report of a compression with opt that gave reports (Model's):
// the target, paths, init and seed of opt, OverallBitsPerWeight, SummarizeByKind and the
// reports themselves.
func NewModelReport(reports []TensorReport, opt Options) ModelReport {
	return ModelReport{TargetBPW: opt.BitsPerWeight, Paths: opt.Paths.String(), Init: opt.Init.String(), Seed: opt.Seed,
		OverallBPW: OverallBitsPerWeight(reports), Kinds: SummarizeByKind(reports), Tensors: reports}
}
