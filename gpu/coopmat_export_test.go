package gpu

// CoopmatPack records CoopmatPack (wgsl/coopmat_pack.wgsl), the A operand of the
// cooperative-matrix GEMMs: a F32 [m, k] (⊙ sa F32 [k] when sa is not nil) to f16 rows with a
// power-of-two scale each, into a16 (U32 [mp, kp/2], element 2w in the low half of word w)
// and rs (F32 [mp]: each row's inverse scale). For tests.
func CoopmatPack(r *Recorder, a, sa, a16, rs *Buffer, m, k, mp, kp int) error {
	return coopPackInto(r, "CoopmatPack", Whole(a), sa, a16, rs, m, k, mp, kp)
}

// CoopmatPackForm returns the workgroup width and the 16-byte vectors per invocation (0: the
// general form) that CoopmatPack uses for rows of k columns padded to kp.
func CoopmatPackForm(k, kp int) (wg, r int) {
	p := coopPackFor(k, kp, false)
	return p.WG, p.R
}
