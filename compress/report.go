package compress

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// TensorReport describes one compressed tensor.
type TensorReport struct {
	Name          string  `json:"name"`
	Kind          string  `json:"kind"`  // q_proj, k_proj, v_proj, o_proj, in_proj_qkv, in_proj_z, out_proj, gate_proj, up_proj or down_proj
	Shape         []int   `json:"shape"` // [m, n]: output, input features
	Rank          int     `json:"rank"`  // r of every path
	Paths         int     `json:"paths"` // 1 or 2
	BitsPerWeight float64 `json:"bits_per_weight"`
	// RelErr is ‖W − Ŵ‖_F / ‖W‖_F with Ŵ reconstructed from the stored (float16) payload;
	// 0 when W = 0.
	RelErr float64 `json:"rel_err"`
	// WeightedRelErr is ‖(W − Ŵ)·diag(s)‖_F / ‖W·diag(s)‖_F, the input-weighted error with
	// s_j = √E[x_j²] of the tensor's calibration statistics (Options.Calibration; s_j floored
	// at 10⁻³·max s): the relative root-mean-square error of the layer's output on inputs
	// with those second moments and uncorrelated features. 0 (absent) without calibration.
	WeightedRelErr float64 `json:"weighted_rel_err,omitempty"`
	// InitRelErr and InitWeightedRelErr are RelErr and WeightedRelErr of InitRefine's
	// starting point (Dual-SVID of the weighted weight), before the refinement: the error
	// the refinement started from. 0 (absent) with InitDualSVID; InitWeightedRelErr also
	// without calibration.
	InitRelErr         float64 `json:"init_rel_err,omitempty"`
	InitWeightedRelErr float64 `json:"init_weighted_rel_err,omitempty"`
}

// OverallBitsPerWeight is the storage cost of all reported tensors together:
// Σ bits / Σ m·n, i.e. the weight-count-weighted mean of their BitsPerWeight (0 for none).
func OverallBitsPerWeight(reports []TensorReport) float64 {
	var bits, weights float64
	for _, r := range reports {
		w := float64(r.Shape[0]) * float64(r.Shape[1])
		bits += r.BitsPerWeight * w
		weights += w
	}
	if weights == 0 {
		return 0
	}
	return bits / weights
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
	// MeanWeightedRelErr and MeanInitWeightedRelErr are the means of the tensors'
	// WeightedRelErr and InitWeightedRelErr (0, absent, when they have none).
	MeanWeightedRelErr     float64 `json:"mean_weighted_rel_err,omitempty"`
	MeanInitWeightedRelErr float64 `json:"mean_init_weighted_rel_err,omitempty"`
}

// SummarizeByKind groups reports by Kind, sorted by kind name.
func SummarizeByKind(reports []TensorReport) []KindSummary {
	by := map[string][]TensorReport{}
	for _, r := range reports {
		by[r.Kind] = append(by[r.Kind], r)
	}
	out := make([]KindSummary, 0, len(by))
	for kind, rs := range by {
		s := KindSummary{Kind: kind, Tensors: len(rs), BitsPerWeight: OverallBitsPerWeight(rs)}
		for _, r := range rs {
			if r.Paths == 2 {
				s.TwoPath++
			}
			s.MeanRelErr += r.RelErr / float64(len(rs))
			s.MaxRelErr = max(s.MaxRelErr, r.RelErr)
			s.MeanWeightedRelErr += r.WeightedRelErr / float64(len(rs))
			s.MeanInitWeightedRelErr += r.InitWeightedRelErr / float64(len(rs))
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// WriteTable writes a plain-text table of reports to w: one row per tensor (name,
// shape m×n, rank, paths, bits per weight, relative error; when any report has them, the
// weighted error "w.err" and the errors of InitRefine's start, "init rel" and "init w"), one
// per kind (SummarizeByKind, with the mean weighted errors when there are any), and the
// overall bits per weight (OverallBitsPerWeight). It returns w's first error.
func WriteTable(w io.Writer, reports []TensorReport) error {
	var b strings.Builder
	width := len("tensor")
	var weighted, init bool
	for _, r := range reports {
		width = max(width, len(r.Name))
		weighted = weighted || r.WeightedRelErr != 0
		init = init || r.InitRelErr != 0
	}
	fmt.Fprintf(&b, "%-*s  %11s  %5s  %5s  %9s  %8s", width, "tensor", "shape", "rank", "paths", "bits/w", "rel.err")
	if weighted {
		fmt.Fprintf(&b, "  %8s", "w.err")
	}
	if init {
		fmt.Fprintf(&b, "  %8s  %8s", "init rel", "init w")
	}
	b.WriteString("\n")
	for _, r := range reports {
		fmt.Fprintf(&b, "%-*s  %11s  %5d  %5d  %9.4f  %8.4f", width, r.Name, fmt.Sprintf("%d×%d", r.Shape[0], r.Shape[1]), r.Rank, r.Paths, r.BitsPerWeight, r.RelErr)
		if weighted {
			fmt.Fprintf(&b, "  %8.4f", r.WeightedRelErr)
		}
		if init {
			fmt.Fprintf(&b, "  %8.4f  %8.4f", r.InitRelErr, r.InitWeightedRelErr)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n%-12s  %7s  %8s  %9s  %13s  %8s", "kind", "tensors", "2-path", "bits/w", "mean rel.err", "max")
	if weighted {
		fmt.Fprintf(&b, "  %11s  %11s", "mean w.err", "init w.err")
	}
	b.WriteString("\n")
	for _, s := range SummarizeByKind(reports) {
		fmt.Fprintf(&b, "%-12s  %7d  %8d  %9.4f  %13.4f  %8.4f", s.Kind, s.Tensors, s.TwoPath, s.BitsPerWeight, s.MeanRelErr, s.MaxRelErr)
		if weighted {
			fmt.Fprintf(&b, "  %11.4f  %11.4f", s.MeanWeightedRelErr, s.MeanInitWeightedRelErr)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\noverall: %d tensors, %.4f bits/weight\n", len(reports), OverallBitsPerWeight(reports))
	_, err := io.WriteString(w, b.String())
	return err
}
