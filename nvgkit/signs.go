package nvgkit

import (
	"fmt"
	"math"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/gpu"
)

// SignConfig holds the sign-learning knobs (DESIGN.md "Sign learning"): every backward adds
// to each sign's int8 score the normalised flip pressure Alpha·(G·b)/RMS(G) after decaying it
// by Beta (gpu.SignScoreUpdate); SignStep flips, per sign matrix, the signs of the highest
// scores ≥ Tau, at most ceil(MaxFlipFrac·count) of them (gpu.SignFlip). Seed selects the
// stochastic rounding.
type SignConfig struct {
	Alpha       float32 `json:"alpha"`         // score units per unit of normalised pressure, > 0
	Beta        float32 `json:"beta"`          // score decay per backward, in [0, 1]
	Tau         int     `json:"tau"`           // least score that flips, 1..127
	MaxFlipFrac float64 `json:"max_flip_frac"` // most flips per step, as a fraction of the matrix's signs, in [0, 1]
	Seed        uint32  `json:"seed"`
}

// DefaultSigns returns the default sign-learning knobs: Alpha 4, Beta 0.95, Tau 48,
// MaxFlipFrac 1e-3, Seed 1. A steady pressure of p RMS settles at a score of 4p/(1−0.95) =
// 80p, so signs under a consistent pressure above 0.6 RMS flip. Tuned on the H200 (tiny
// teacher, 16 × 512 tokens, 100 steps; DESIGN.md "Sign learning"): of (α, τ, budget) =
// (2, 64, 1e-3), (2, 32, 3e-3), (2, 64, 3e-4), (4, 48, 1e-3), (4, 32, 3e-3), (8, 32, 1e-2)
// and (4, 48, 3e-3), (4, 48, 1e-3) gave the lowest held-out perplexity (35.3 against 136.9
// for the metric alone); τ = 32 flips too much and diverges.
func DefaultSigns() SignConfig {
	return SignConfig{Alpha: 4, Beta: 0.95, Tau: 48, MaxFlipFrac: 1e-3, Seed: 1}
}

// Validate reports the first knob outside its range, naming it.
func (c SignConfig) Validate() error {
	switch {
	case !(c.Alpha > 0) || math.IsInf(float64(c.Alpha), 0):
		return fmt.Errorf("sign alpha = %g must be positive and finite", c.Alpha)
	case !(c.Beta >= 0 && c.Beta <= 1):
		return fmt.Errorf("sign beta = %g must be in [0, 1]", c.Beta)
	case c.Tau < 1 || c.Tau > 127:
		return fmt.Errorf("sign tau = %d must be in 1..127", c.Tau)
	case !(c.MaxFlipFrac >= 0 && c.MaxFlipFrac <= 1):
		return fmt.Errorf("sign max flip fraction = %g must be in [0, 1]", c.MaxFlipFrac)
	}
	return nil
}

// signNet is a Student's sign-learning state, shared by its projections' blrSigns.
type signNet struct {
	cfg     SignConfig
	on      bool   // scores accumulate in the backward
	paused  bool   // PauseSigns: the backward records no sign work at all
	step    uint32 // the step the next score updates belong to
	counts  *gpu.Buffer
	layerOf []int // decoder layer of each count slot (one per sign matrix)
}

// blrSigns is one BLR projection's sign state: per path the scores of U and V (U32, 4 per
// word; nil until EnableSigns) and, while captured, its accumulated sign gradients.
type blrSigns struct {
	net          *signNet
	index        int // first matrix index (U of path 0); U of path p is index+2p, V index+2p+1
	su, sv       []*gpu.Buffer
	capU, capV   []*gpu.Buffer
	captureOn    bool
	captureValid bool
}

// active reports whether l's backward records the sign part (sign training or a capture on,
// not paused).
func (s *blrSigns) active() bool {
	return s != nil && s.net != nil && !s.net.paused && (s.net.on || s.captureOn)
}

// record adds the sign part of l's backward: BLRSignGrad into temporaries (or the capture
// buffers), then each matrix's score update. t1 and dt2: the backward's, per path (nil:
// recomputed). A no-op unless active.
func (s *blrSigns) record(r *gpu.Recorder, l *gpu.BLRLayer, x *gpu.Buffer, t1, dt2 []*gpu.Buffer, dy *gpu.Buffer, rows int) error {
	if !s.active() {
		return nil
	}
	gu := make([]*gpu.Buffer, len(l.Paths))
	gv := make([]*gpu.Buffer, len(l.Paths))
	for p := range l.Paths {
		var err error
		if gu[p], err = r.Temp("sign grad U", gpu.F32, l.M*l.Rank); err != nil {
			return err
		}
		if gv[p], err = r.Temp("sign grad V", gpu.F32, l.Rank*l.N); err != nil {
			return err
		}
	}
	if err := gpu.BLRSignGrad(r, l, x, t1, dt2, dy, gu, gv, rows); err != nil {
		return err
	}
	if s.captureOn {
		for p := range l.Paths {
			if err := gpu.ResidualAdd(r, s.capU[p], gu[p]); err != nil {
				return err
			}
			if err := gpu.ResidualAdd(r, s.capV[p], gv[p]); err != nil {
				return err
			}
		}
		s.captureValid = true
	}
	if !s.net.on {
		return nil
	}
	c := s.net.cfg
	for p := range l.Paths {
		mu, mv, err := l.SignMatrices(p, s.su[p], s.sv[p])
		if err != nil {
			return err
		}
		for k, m := range []gpu.SignMatrix{mu, mv} {
			g := []*gpu.Buffer{gu[p], gv[p]}[k]
			cfg := gpu.SignScoreConfig{Alpha: c.Alpha, Beta: c.Beta, Seed: c.Seed, Step: s.net.step, Matrix: uint32(s.index + 2*p + k)}
			if err := gpu.SignScoreUpdate(r, m, g, cfg); err != nil {
				return err
			}
		}
	}
	return nil
}

// signMatrix is one named sign matrix of a Student: its projection, path and factor.
type signMatrix struct {
	l    *linear
	p    int
	isV  bool
	name string
}

func (m signMatrix) shape() (rows, cols int) {
	if m.isV {
		return m.l.blr.Rank, m.l.blr.N
	}
	return m.l.blr.M, m.l.blr.Rank
}

func (m signMatrix) bits() *gpu.Buffer {
	if m.isV {
		return m.l.blr.Paths[m.p].V
	}
	return m.l.blr.Paths[m.p].U
}

func (m signMatrix) scores() *gpu.Buffer {
	if m.isV {
		return m.l.signs.sv[m.p]
	}
	return m.l.signs.su[m.p]
}

// signMatrices lists every sign matrix in load order: per projection, per path, U then V.
func (n *Net) signMatrices() []signMatrix {
	var out []signMatrix
	for _, l := range n.st.blrs {
		for p := range l.blr.Paths {
			out = append(out, signMatrix{l, p, false, arch.MetricName(l.name, p, "U")},
				signMatrix{l, p, true, arch.MetricName(l.name, p, "V")})
		}
	}
	return out
}

// SignNames returns the names of a Student's sign matrices, "<tensor>.p<path>.U" ([m, r])
// and "<tensor>.p<path>.V" ([r, n]) (arch.MetricName with "U", "V"), in load order: the
// keys of ReadSigns, ReadSignScores, ReadSignGrad and the checkpoint's sign state.
func (n *Net) SignNames() []string {
	if n.requireStudent("SignNames") != nil {
		return nil
	}
	var out []string
	for _, m := range n.signMatrices() {
		out = append(out, m.name)
	}
	return out
}

func (n *Net) signByName(op, name string) (signMatrix, error) {
	if err := n.requireStudent(op); err != nil {
		return signMatrix{}, err
	}
	for _, m := range n.signMatrices() {
		if m.name == name {
			return m, nil
		}
	}
	return signMatrix{}, fmt.Errorf("nvgkit.%s: no sign matrix %q (see Net.SignNames)", op, name)
}

// SignShape returns the [rows, cols] of the named sign matrix and the number of live ranks
// (ranks beyond it are padding: never flipped, score 0). Errors: unknown name, not a Student.
func (n *Net) SignShape(name string) (rows, cols, live int, err error) {
	m, err := n.signByName("SignShape", name)
	if err != nil {
		return 0, 0, 0, err
	}
	rows, cols = m.shape()
	return rows, cols, m.l.liveRank, nil
}

// EnableSigns turns sign learning on for a Student with the knobs cfg: it allocates one int8
// score per sign (zero; 8 bits of state per sign) and makes every later backward (Step)
// update the scores; SignStep flips. Calling it again changes the knobs and keeps the
// scores. Off by default: without it, Step records exactly what it did before. Errors: an
// invalid cfg, not a Student, an allocation failure.
func EnableSigns(net *Net, cfg SignConfig) error {
	const op = "EnableSigns"
	if err := net.requireStudent(op); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	sn := net.st.signs
	if sn.counts == nil {
		idx := 0
		var layerOf []int
		for _, l := range net.st.blrs {
			s := l.signs
			s.index = idx
			for range l.blr.Paths {
				su, err := gpu.NewSignScores(net.dev, l.name+".scoreU", l.blr.M, l.blr.Rank)
				if err != nil {
					return fmt.Errorf("nvgkit.%s: %w", op, memRemedy(err))
				}
				net.st.owned = append(net.st.owned, su)
				sv, err := gpu.NewSignScores(net.dev, l.name+".scoreV", l.blr.Rank, l.blr.N)
				if err != nil {
					return fmt.Errorf("nvgkit.%s: %w", op, memRemedy(err))
				}
				net.st.owned = append(net.st.owned, sv)
				s.su, s.sv = append(s.su, su), append(s.sv, sv)
				layerOf = append(layerOf, l.layer, l.layer)
				idx += 2
			}
		}
		var err error
		if sn.counts, err = net.dev.NewBuffer("student.signFlips", gpu.U32, max(idx, 1)); err != nil {
			return fmt.Errorf("nvgkit.%s: %w", op, err)
		}
		net.st.owned = append(net.st.owned, sn.counts)
		sn.layerOf = layerOf
		sn.step = 1
	}
	sn.cfg, sn.on = cfg, true
	return nil
}

// SignsEnabled reports whether EnableSigns has turned sign learning on.
func (n *Net) SignsEnabled() bool {
	return n != nil && n.st != nil && n.st.signs.on
}

// SignStep ends step step of sign learning: every sign matrix flips its signs of the highest
// scores ≥ cfg.Tau, at most gpu.SignFlipBudget(live signs, cfg.MaxFlipFrac) of them, exactly
// XORing the packed bits and resetting those scores (gpu.SignFlip); later score updates
// belong to step + 1. Call it after Adam. One submit; SignFlipCounts reads what flipped.
// Errors: signs not enabled, step < 1, then a GPU error.
func SignStep(net *Net, step int) error {
	const op = "SignStep"
	if err := net.requireStudent(op); err != nil {
		return err
	}
	sn := net.st.signs
	if !sn.on {
		return fmt.Errorf("nvgkit.%s: sign learning is off (EnableSigns)", op)
	}
	if step < 1 {
		return fmt.Errorf("nvgkit.%s: step = %d must be ≥ 1", op, step)
	}
	ms := net.signMatrices()
	err := net.dev.Run(func(r *gpu.Recorder) error {
		for i, m := range ms {
			sm, err := m.gpu()
			if err != nil {
				return err
			}
			rows, cols := m.shape()
			live := rows * cols / m.l.blr.Rank * m.l.liveRank
			c := gpu.SignFlipConfig{Tau: sn.cfg.Tau, Budget: gpu.SignFlipBudget(live, sn.cfg.MaxFlipFrac)}
			if err := gpu.SignFlip(r, sm, sn.counts, i, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	sn.step = uint32(step) + 1
	return nil
}

// SetSignStep sets the step the next score updates belong to (their rounding offsets); a
// resumed run sets it to the first step it runs. Errors: not a Student, step < 1.
func SetSignStep(net *Net, step int) error {
	if err := net.requireStudent("SetSignStep"); err != nil {
		return err
	}
	if step < 1 {
		return fmt.Errorf("nvgkit.SetSignStep: step = %d must be ≥ 1", step)
	}
	net.st.signs.step = uint32(step)
	return nil
}

func (m signMatrix) gpu() (gpu.SignMatrix, error) {
	u, v, err := m.l.blr.SignMatrices(m.p, m.l.signs.su[m.p], m.l.signs.sv[m.p])
	if m.isV {
		return v, err
	}
	return u, err
}

// SignFlipCounts returns the flips of the last SignStep per decoder layer (index = layer,
// len = the number of layers) and per sign matrix (by SignNames). Errors: signs not
// enabled, a readback error.
func SignFlipCounts(net *Net) (perLayer []int, perMatrix map[string]int, err error) {
	const op = "SignFlipCounts"
	if err := net.requireStudent(op); err != nil {
		return nil, nil, err
	}
	sn := net.st.signs
	if sn.counts == nil {
		return nil, nil, fmt.Errorf("nvgkit.%s: sign learning is off (EnableSigns)", op)
	}
	c, err := net.dev.ReadUint32(sn.counts)
	if err != nil {
		return nil, nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	perLayer = make([]int, len(net.layers))
	perMatrix = map[string]int{}
	for i, m := range net.signMatrices() {
		perLayer[sn.layerOf[i]] += int(c[i])
		perMatrix[m.name] = int(c[i])
	}
	return perLayer, perMatrix, nil
}

// ReadSigns returns the named sign matrix's packed bits, rows·cols/8 bytes in the cmf
// payload's order (element e is bit e & 7 of byte e >> 3; 1 ↦ +1). Errors: unknown name,
// a readback error.
func (n *Net) ReadSigns(name string) ([]byte, error) {
	m, err := n.signByName("ReadSigns", name)
	if err != nil {
		return nil, err
	}
	w, err := n.dev.ReadUint32(m.bits())
	if err != nil {
		return nil, fmt.Errorf("nvgkit.ReadSigns: %w", err)
	}
	rows, cols := m.shape()
	return wordBytes(w, rows*cols/8), nil
}

func wordBytes(w []uint32, n int) []byte {
	b := make([]byte, 4*len(w))
	for i, x := range w {
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	}
	return b[:n]
}

func bytesWords(b []byte, words int) []uint32 {
	w := make([]uint32, words)
	for i, x := range b {
		w[i/4] |= uint32(x) << (8 * (i % 4))
	}
	return w
}

// WriteSigns overwrites the named sign matrix's bits with bits (ReadSigns' layout). Bits of
// padded ranks must equal the current ones (they are not trained). Errors: unknown name, a
// wrong length, a changed padded bit, an upload error.
func (n *Net) WriteSigns(name string, bits []byte) error {
	const op = "WriteSigns"
	m, err := n.signByName(op, name)
	if err != nil {
		return err
	}
	rows, cols := m.shape()
	if len(bits) != rows*cols/8 {
		return fmt.Errorf("nvgkit.%s: %s: %d bytes, want %d", op, name, len(bits), rows*cols/8)
	}
	old, err := n.ReadSigns(name)
	if err != nil {
		return err
	}
	for e := 0; e < rows*cols; e++ {
		if !m.live(e) && (old[e>>3]^bits[e>>3])>>(e&7)&1 != 0 {
			return fmt.Errorf("nvgkit.%s: %s: sign %d is rank padding and must not change", op, name, e)
		}
	}
	if err := n.dev.WriteUint32(m.bits(), bytesWords(bits, m.bits().Len())); err != nil {
		return fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	return nil
}

func (m signMatrix) live(e int) bool {
	_, cols := m.shape()
	if m.isV {
		return e/cols < m.l.liveRank
	}
	return e%cols < m.l.liveRank
}

// ApplySignFlips flips the named matrix's signs where mask (ReadSigns' layout) has a 1: an
// exact XOR of the bits; the flipped signs' scores (when enabled) reset to 0. Returns the
// number of flips. Errors: those of WriteSigns (a mask bit on rank padding included).
func (n *Net) ApplySignFlips(name string, mask []byte) (int, error) {
	old, err := n.ReadSigns(name)
	if err != nil {
		return 0, err
	}
	if len(mask) != len(old) {
		return 0, fmt.Errorf("nvgkit.ApplySignFlips: %s: mask of %d bytes, want %d", name, len(mask), len(old))
	}
	flips := 0
	for i := range old {
		old[i] ^= mask[i]
		for b := mask[i]; b != 0; b &= b - 1 {
			flips++
		}
	}
	if err := n.WriteSigns(name, old); err != nil {
		return 0, err
	}
	if n.st.signs.counts != nil {
		sc, err := n.ReadSignScores(name)
		if err != nil {
			return 0, err
		}
		for e := range sc {
			if mask[e>>3]>>(e&7)&1 != 0 {
				sc[e] = 0
			}
		}
		if err := n.WriteSignScores(name, sc); err != nil {
			return 0, err
		}
	}
	return flips, nil
}

// ReadSignScores returns the named matrix's int8 scores, rows·cols, row-major (positive:
// pressure to flip). Errors: unknown name, signs never enabled, a readback error.
func (n *Net) ReadSignScores(name string) ([]int8, error) {
	m, err := n.signByName("ReadSignScores", name)
	if err != nil {
		return nil, err
	}
	if n.st.signs.counts == nil {
		return nil, fmt.Errorf("nvgkit.ReadSignScores: sign learning is off (EnableSigns)")
	}
	w, err := n.dev.ReadUint32(m.scores())
	if err != nil {
		return nil, fmt.Errorf("nvgkit.ReadSignScores: %w", err)
	}
	rows, cols := m.shape()
	b := wordBytes(w, rows*cols)
	out := make([]int8, len(b))
	for i, x := range b {
		out[i] = int8(x)
	}
	return out, nil
}

// WriteSignScores overwrites the named matrix's scores (ReadSignScores' layout); scores of
// rank padding must be 0 and every score in −127..127. Errors: unknown name, signs never
// enabled, a wrong length, a bad value (named), an upload error.
func (n *Net) WriteSignScores(name string, scores []int8) error {
	const op = "WriteSignScores"
	m, err := n.signByName(op, name)
	if err != nil {
		return err
	}
	if n.st.signs.counts == nil {
		return fmt.Errorf("nvgkit.%s: sign learning is off (EnableSigns)", op)
	}
	rows, cols := m.shape()
	if len(scores) != rows*cols {
		return fmt.Errorf("nvgkit.%s: %s: %d scores, want %d", op, name, len(scores), rows*cols)
	}
	b := make([]byte, len(scores))
	for e, v := range scores {
		if v == -128 || (!m.live(e) && v != 0) {
			return fmt.Errorf("nvgkit.%s: %s: score[%d] = %d (−127..127, 0 on rank padding)", op, name, e, v)
		}
		b[e] = byte(v)
	}
	if err := n.dev.WriteUint32(m.scores(), bytesWords(b, m.scores().Len())); err != nil {
		return fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	return nil
}

// CaptureSignGrad starts (on) or stops (off, freeing the buffers) accumulating the named
// matrix's straight-through sign gradient over the following backwards (Step), f32
// [rows·cols] on the GPU for that one matrix's projection only (the U and V of all its
// paths: the capture is per projection); ReadSignGrad reads it, ZeroSignGrads clears it.
// Works with sign learning off too. Errors: unknown name, an allocation failure.
func (n *Net) CaptureSignGrad(name string, on bool) error {
	const op = "CaptureSignGrad"
	m, err := n.signByName(op, name)
	if err != nil {
		return err
	}
	s := m.l.signs
	if !on {
		for _, b := range append(s.capU, s.capV...) {
			b.Release()
		}
		s.capU, s.capV, s.captureOn, s.captureValid = nil, nil, false, false
		return nil
	}
	if s.captureOn {
		return nil
	}
	bl := m.l.blr
	for range bl.Paths {
		u, err := n.dev.NewBuffer(m.l.name+".signGradU", gpu.F32, bl.M*bl.Rank)
		if err != nil {
			return fmt.Errorf("nvgkit.%s: %w", op, err)
		}
		v, err := n.dev.NewBuffer(m.l.name+".signGradV", gpu.F32, bl.Rank*bl.N)
		if err != nil {
			u.Release()
			return fmt.Errorf("nvgkit.%s: %w", op, err)
		}
		s.capU, s.capV = append(s.capU, u), append(s.capV, v)
	}
	s.net, s.captureOn = n.st.signs, true
	return nil
}

// ReadSignGrad returns the named matrix's sign gradient accumulated since CaptureSignGrad
// (or the last reset or ZeroSignGrads), rows·cols row-major (the gradient of the loss with respect to each
// sign as a real value; positive G·b is pressure to flip), and zeroes it when reset.
// Errors: not captured, no backward since, a GPU error.
func (n *Net) ReadSignGrad(name string, reset bool) ([]float32, error) {
	const op = "ReadSignGrad"
	m, err := n.signByName(op, name)
	if err != nil {
		return nil, err
	}
	s := m.l.signs
	if !s.captureOn {
		return nil, fmt.Errorf("nvgkit.%s: %s is not captured (CaptureSignGrad)", op, name)
	}
	if !s.captureValid {
		return nil, fmt.Errorf("nvgkit.%s: %s: no backward since the capture began", op, name)
	}
	b := s.capU[m.p]
	if m.isV {
		b = s.capV[m.p]
	}
	g, err := n.dev.ReadFloat32(b)
	if err != nil {
		return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
	}
	if reset {
		if err := n.dev.Run(func(r *gpu.Recorder) error {
			for _, c := range append(s.capU, s.capV...) {
				if err := gpu.Zero(r, c); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("nvgkit.%s: %w", op, err)
		}
		s.captureValid = false
	}
	return g, nil
}

// readSigns replaces the sign bits of every path of w (decoded from the model l was
// loaded from) by the GPU's, so an export carries the learned signs.
func (l *linear) readSigns(d *gpu.Device, w *cmf.BLRWeight) error {
	for p, q := range l.blr.Paths {
		u, err := d.ReadUint32(q.U)
		if err != nil {
			return err
		}
		v, err := d.ReadUint32(q.V)
		if err != nil {
			return err
		}
		w.Paths[p].U, w.Paths[p].V = wordBytes(u, len(w.Paths[p].U)), wordBytes(v, len(w.Paths[p].V))
	}
	return nil
}

// PauseSigns pauses (paused true) or resumes the sign work of the backward: while paused,
// Step neither updates the sign scores nor adds to the captured sign gradients, so a side
// computation on the live net (a gradient check) leaves the sign state as it was. It does
// not change EnableSigns' or CaptureSignGrad's settings, and SignStep still flips. Errors:
// not a Student.
func PauseSigns(net *Net, paused bool) error {
	if err := net.requireStudent("PauseSigns"); err != nil {
		return err
	}
	net.st.signs.paused = paused
	return nil
}

// ZeroSignGrads sets every captured sign gradient (CaptureSignGrad) to zero, in one submit
// (nothing when none is captured), as ZeroGrads does the metric's gradients: a captured
// gradient then holds what the following backwards add. Errors: not a Student, a GPU error.
func ZeroSignGrads(net *Net) error {
	if err := net.requireStudent("ZeroSignGrads"); err != nil {
		return err
	}
	var bufs []*gpu.Buffer
	for _, l := range net.st.blrs {
		bufs = append(append(bufs, l.signs.capU...), l.signs.capV...)
	}
	if len(bufs) == 0 {
		return nil
	}
	if err := net.dev.Run(func(r *gpu.Recorder) error {
		for _, b := range bufs {
			if err := gpu.Zero(r, b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("nvgkit.ZeroSignGrads: %w", err)
	}
	return nil
}

// releaseCaptures frees the capture buffers of every projection (Net.Release).
func (s *studentState) releaseCaptures() {
	for _, l := range s.blrs {
		if c := l.signs; c != nil {
			for _, b := range append(c.capU, c.capV...) {
				b.Release()
			}
			c.capU, c.capV, c.captureOn, c.captureValid = nil, nil, false, false
		}
	}
}

// DisableSigns turns the score updates off again (Step records what it did before
// EnableSigns); the scores and learned signs stay. A no-op on a net never enabled.
func DisableSigns(net *Net) error {
	if err := net.requireStudent("DisableSigns"); err != nil {
		return err
	}
	net.st.signs.on = false
	return nil
}
