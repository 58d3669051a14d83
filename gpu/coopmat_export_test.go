package gpu

// CoopmatPack records CoopmatPack (wgsl/coopmat_pack.wgsl), the A operand of the
// cooperative-matrix GEMMs: a F32 [m, k] (⊙ sa F32 [k] when sa is not nil) to f16 rows with a
// power-of-two scale each, into a16 (U32 [mp, kp/2], element 2w in the low half of word w)
// and rs (F32 [mp]: each row's inverse scale); pairs stores each group of 4 columns in the
// order 0, 2, 1, 3 (the 8-bit GEMM's A). For tests.
func CoopmatPack(r *Recorder, a, sa, a16, rs *Buffer, m, k, mp, kp int, pairs bool) error {
	return coopPackInto(r, "CoopmatPack", Whole(a), sa, a16, rs, m, k, mp, kp, pairs)
}

// CoopmatPackTwin records CoopmatPack's twin form (both BLR paths' operands in one pass):
// a ⊙ sa into a16, rs and a ⊙ sb into b16, rsb, as two CoopmatPack calls would (k % 4 = 0,
// kp ≤ 16384). For tests.
func CoopmatPackTwin(r *Recorder, a, sa, sb, a16, rs, b16, rsb *Buffer, m, k, mp, kp int) error {
	return coopPackTwinInto(r, "CoopmatPackTwin", a, [2]*Buffer{sa, sb}, [2]*Buffer{a16, b16}, [2]*Buffer{rs, rsb}, m, k, mp, kp)
}

// CoopmatPackForm returns the threads per row and the 16-byte vectors per invocation (0: the
// general form, whose workgroup of 64 threads is one row) that CoopmatPack uses for rows of k
// columns padded to kp.
func CoopmatPackForm(k, kp int) (threads, r int) {
	p := coopPackFor(k, kp, false, false)
	if p.R == 0 {
		return p.WG, 0
	}
	return p.T, p.R
}

// SetCoopPackGeneral makes CoopmatPack take its general form (on) or the automatic choice
// (off); it returns a function restoring the old choice.
func SetCoopPackGeneral(on bool) (restore func()) {
	return swap(&coopPackGeneral, on)
}
