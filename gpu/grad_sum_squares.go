package gpu

const (
	gradWG = 256
	// gradMaxGroups caps GradSumSquares' first-stage workgroups (and its partial sums).
	gradMaxGroups = 1024
)

// GradSumSquares records out[0] += Σ_i g_i² for the F32 buffer g (any shape) and the F32 [1]
// buffer out, so that calling it for every gradient buffer after Zero(out) leaves the squared
// global gradient norm in out (for clipping and the non-finite step check; read it with
// ReadFloat32). Up to 1024 workgroups write partial sums (fma chains over strided indices),
// which one workgroup adds into out: f32, deterministic. Errors: dtypes, an empty g, out
// not of length 1, or g and out being the same buffer.
func GradSumSquares(r *Recorder, g, out *Buffer) error {
	const op = "GradSumSquares"
	if err := need(op, "g", g, -1, F32); err != nil {
		return err
	}
	if err := positive(op, "len(g)", g.numel); err != nil {
		return err
	}
	if err := need(op, "out", out, 1, F32); err != nil {
		return err
	}
	if err := distinct(op, map[string]*Buffer{"g": g, "out": out}); err != nil {
		return err
	}
	groups := min((g.numel+gradWG*4-1)/(gradWG*4), gradMaxGroups)
	kernel := func(stage string) (*Kernel, error) {
		return r.d.Kernel(KernelSpec{Name: op + "." + stage, File: "grad_sum_squares.wgsl",
			Params: struct {
				Stage string
				WG    int
			}{stage, gradWG},
			Bindings: []Access{Read, ReadWrite}, Uniforms: 2})
	}
	kp, err := kernel("partial")
	if err != nil {
		return err
	}
	kf, err := kernel("final")
	if err != nil {
		return err
	}
	partial, err := r.Temp(op+" partial", F32, groups)
	if err != nil {
		return err
	}
	uni := []uint32{uint32(g.numel), uint32(groups)}
	mark := len(r.ops)
	if err := r.Dispatch(kp, [3]int{groups, 1, 1}, uni, Whole(g), Whole(partial)); err != nil {
		return err
	}
	if err := r.Dispatch(kf, [3]int{1, 1, 1}, uni, Whole(partial), Whole(out)); err != nil {
		r.ops = r.ops[:mark]
		return err
	}
	return nil
}
