package gpu

// CoopmatPack records CoopmatPack (wgsl/coopmat_pack.wgsl), the A operand of the
// cooperative-matrix GEMMs: a F32 [m, k] (⊙ sa F32 [k] when sa is not nil) to f16 rows with a
// power-of-two scale each, into a16 (U32 [mp, kp/2], element 2w in the low half of word w)
// and rs (F32 [mp]: each row's inverse scale); pairs stores each group of 4 columns in the
// order 0, 2, 1, 3 (the 8-bit GEMM's A). For tests.
func CoopmatPack(r *Recorder, a, sa, a16, rs *Buffer, m, k, mp, kp int, pairs bool) error {
	return coopPackInto(r, "CoopmatPack", Whole(a), sa, Whole(a16), Whole(rs), m, k, mp, kp, pairs)
}

// CoopmatPackTwin records CoopmatPack's twin form (both BLR paths' operands in one pass) in
// the layout coopPackPaths gives it (CoopPairLayout): a ⊙ sa into a16 and rs from byte 0,
// a ⊙ sb into a16 from byte aOff and rs from byte rsOff, each part what a CoopmatPack call
// writes (U32 [mp, kp/2], F32 [mp]; k % 4 = 0, kp ≤ 16384). a16 and rs must hold at least
// CoopPairLayout's aTotal and rsTotal bytes. For tests.
func CoopmatPackTwin(r *Recorder, a, sa, sb, a16, rs *Buffer, m, k, mp, kp int) error {
	aOff, rsOff, _, _ := coopPairLayout(r.d.StorageAlign(), mp, kp)
	aBytes, rsBytes := uint64(mp)*uint64(kp)*2, uint64(mp)*4
	return coopPackTwinInto(r, "CoopmatPackTwin", a, [2]*Buffer{sa, sb},
		[2]Binding{{Buf: a16, Size: aBytes}, {Buf: a16, Offset: aOff, Size: aBytes}},
		[2]Binding{{Buf: rs, Size: rsBytes}, {Buf: rs, Offset: rsOff, Size: rsBytes}}, m, k, mp, kp)
}

// CoopPairLayout returns where coopPackPaths puts the two paths' packs of an A padded to
// [mp, kp] on d: path 1's a16 at byte aOff and its rs at byte rsOff (path 0's at 0), and the
// bytes of the a16 and rs buffers holding both, aTotal and rsTotal.
func CoopPairLayout(d *Device, mp, kp int) (aOff, rsOff, aTotal, rsTotal uint64) {
	return coopPairLayout(d.StorageAlign(), mp, kp)
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
