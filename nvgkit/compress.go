package nvgkit

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/nvg-project/nvg/cmf"
)

// Compress turns teacher into a binary-low-rank student (DESIGN.md §5) with
// cmf.Compress: every large linear of every decoder layer becomes a BLR tensor at
// opt.BitsPerWeight (default 1.0) with 1, 2 or automatically chosen paths; the other
// tensors are shared with teacher, which must stay open while the student is used or
// written (cmf.WriteCMF). Reports, one per compressed tensor sorted by name, give rank,
// paths, bits per weight and relative reconstruction error. opt.Products chooses where
// the large matrix products run (default gonum float64 on the CPU;
// cmf.CPUProducts{Float32: true} is ~2× faster there); CompressOn runs them on a GPU.
// Errors: a nil teacher, a bad option, or a tensor that cannot be compressed (named).
func Compress(teacher *cmf.Model, opt cmf.CompressOptions) (*cmf.Model, []cmf.TensorReport, error) {
	return CompressProgress(teacher, opt, nil)
}

// CompressProgress is Compress with a progress callback, called after each compressed
// tensor with the number done, the total and the tensor's name (one call at a time).
func CompressProgress(teacher *cmf.Model, opt cmf.CompressOptions, progress func(done, total int, name string)) (*cmf.Model, []cmf.TensorReport, error) {
	if teacher == nil {
		return nil, nil, fmt.Errorf("nvgkit.Compress: nil teacher")
	}
	return cmf.Compress(teacher, opt, progress)
}

// KindSummary aggregates the compression reports of one kind of linear (for example
// "gate_proj") over all layers.
type KindSummary struct {
	Kind          string  `json:"kind"`
	Tensors       int     `json:"tensors"`
	TwoPath       int     `json:"two_path"`        // tensors that got 2 paths
	BitsPerWeight float64 `json:"bits_per_weight"` // Σ bits / Σ weights over the kind
	// MeanRelErr is the mean over the kind's tensors of ‖W−Ŵ‖_F/‖W‖_F; MaxRelErr the largest.
	MeanRelErr float64 `json:"mean_rel_err"`
	MaxRelErr  float64 `json:"max_rel_err"`
}

// SummarizeByKind groups reports by Kind, sorted by kind name.
func SummarizeByKind(reports []cmf.TensorReport) []KindSummary {
	by := map[string][]cmf.TensorReport{}
	for _, r := range reports {
		by[r.Kind] = append(by[r.Kind], r)
	}
	out := make([]KindSummary, 0, len(by))
	for kind, rs := range by {
		s := KindSummary{Kind: kind, Tensors: len(rs), BitsPerWeight: cmf.OverallBitsPerWeight(rs)}
		for _, r := range rs {
			if r.Paths == 2 {
				s.TwoPath++
			}
			s.MeanRelErr += r.RelErr / float64(len(rs))
			s.MaxRelErr = max(s.MaxRelErr, r.RelErr)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// WriteCompressTable writes a plain-text table of reports to w: one row per tensor (name,
// shape m×n, rank, paths, bits per weight, relative error), one per kind (SummarizeByKind),
// and the overall bits per weight (cmf.OverallBitsPerWeight). It returns w's first error.
func WriteCompressTable(w io.Writer, reports []cmf.TensorReport) error {
	var b strings.Builder
	width := len("tensor")
	for _, r := range reports {
		width = max(width, len(r.Name))
	}
	fmt.Fprintf(&b, "%-*s  %11s  %5s  %5s  %9s  %8s\n", width, "tensor", "shape", "rank", "paths", "bits/w", "rel.err")
	for _, r := range reports {
		fmt.Fprintf(&b, "%-*s  %11s  %5d  %5d  %9.4f  %8.4f\n", width, r.Name, fmt.Sprintf("%d×%d", r.Shape[0], r.Shape[1]), r.Rank, r.Paths, r.BitsPerWeight, r.RelErr)
	}
	fmt.Fprintf(&b, "\n%-12s  %7s  %8s  %9s  %13s  %8s\n", "kind", "tensors", "2-path", "bits/w", "mean rel.err", "max")
	for _, s := range SummarizeByKind(reports) {
		fmt.Fprintf(&b, "%-12s  %7d  %8d  %9.4f  %13.4f  %8.4f\n", s.Kind, s.Tensors, s.TwoPath, s.BitsPerWeight, s.MeanRelErr, s.MaxRelErr)
	}
	fmt.Fprintf(&b, "\noverall: %d tensors, %.4f bits/weight\n", len(reports), cmf.OverallBitsPerWeight(reports))
	_, err := io.WriteString(w, b.String())
	return err
}
