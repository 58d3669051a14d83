package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/nvg-project/nvg/gpu"
	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/host"
	"github.com/x448/float16"
)

type topkResult struct {
	lse  []float32
	ids  []uint32
	logp []float32
}

func runLogitsTopK(t *testing.T, d *gpu.Device, hf []float32, eb []uint16, rows, hidden, vocab, k, slice int) topkResult {
	t.Helper()
	h := must(d.UploadFloat32("h", hf, rows, hidden)).T(t)
	e := must(d.UploadF16("E", eb, vocab, hidden)).T(t)
	lse := must(d.NewBuffer("lse", gpu.F32, rows)).T(t)
	ids := must(d.NewBuffer("ids", gpu.U32, rows, k)).T(t)
	logp := must(d.NewBuffer("logp", gpu.F32, rows, k)).T(t)
	defer func() {
		for _, b := range []*gpu.Buffer{h, e, lse, ids, logp} {
			b.Release()
		}
	}()
	err := d.Run(func(r *gpu.Recorder) error {
		return gpu.LogitsTopK(r, h, e, gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: k, SliceRows: slice}, lse, ids, logp)
	})
	if err != nil {
		t.Fatal(err)
	}
	return topkResult{must(d.ReadFloat32(lse)).T(t), must(d.ReadUint32(ids)).T(t), must(d.ReadFloat32(logp)).T(t)}
}

// TestLogitsTopK compares with host.LogSumExp and host.TopK on the f64 logits of the same
// f32 h and f16 E. Tolerances:
//   - each logit is a K-term f32 dot product: |err| ≤ (H+1)·u·Σ|h||e| =: b_v;
//   - lse: the logit error (max b_v) plus the f32 sum of exp: per-term exp error
//     ≤ (3 + 2·spread) ulp for arguments in [−spread, 0], the summation (cols/WG + log₂WG
//   - slices)·u, the rescale exp, and log (2⁻²¹ absolute near 1, else 3 ulp);
//   - ids: the GPU's rank-j id must have a host logit within 2·max b_v of the host's
//     rank-j logit (near-ties may swap); ids distinct;
//   - logp: b_v + the lse tolerance.
//
// One line per merge form: the workgroup form's rank merge (rounds where the candidates do
// not fit) and its rounds-only twin, and the lane-blocked form of CPU adapters.
func TestLogitsTopK(t *testing.T) {
	eachTopKForm(t, testLogitsTopK)
}

// topkForms are LogitsTopK's merge forms: the lanes setting (SetLogitsTopKLanes) and the
// rounds-only switch (SetLogitsTopKRounds) that select each.
var topkForms = []struct {
	name   string
	lanes  int
	rounds bool
}{{"rank", -1, false}, {"rounds", -1, true}, {"lanes", 1, false}}

// eachTopKForm runs body once per LogitsTopK merge form, the lane-blocked one only where the
// device has a probed subgroup size (CPU adapters, and GPUs where it is forced).
func eachTopKForm(t *testing.T, body func(t *testing.T, d *gpu.Device)) {
	d := gputest.Open(t)
	for _, f := range topkForms {
		t.Run(f.name, func(t *testing.T) {
			if f.lanes > 0 && gpu.LogitsTopKLanesSize(d) == 0 {
				t.Skipf("the lane-blocked merge needs a probed subgroup size; %s has none", d.Info().Name)
			}
			defer gpu.SetLogitsTopKLanes(f.lanes)()
			defer gpu.SetLogitsTopKRounds(f.rounds)()
			body(t, d)
		})
	}
}

func testLogitsTopK(t *testing.T, d *gpu.Device) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, c := range []struct{ rows, hidden, vocab, k, slice int }{
		{3, 45, 1000, 64, 256}, // 4 slices, last one partial, odd hidden
		{5, 16, 300, 5, 128},   // 3 slices
		{2, 33, 77, 1, 0},      // one slice smaller than the alignment, auto slice size
		{1, 8, 64, 64, 128},    // k = vocab
		{2, 8, 2000, 16, 1536}, // a slice larger than the merge pool: the unfiltered path
		{3, 16, 100, 10, 0},    // one column per thread: the rank form's pool bound is the 10th logit
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			rows, hidden, vocab, k := c.rows, c.hidden, c.vocab, c.k
			hf, hd := randF32(rng, rows*hidden, 1)
			eb, ed := randF16(rng, vocab*hidden, 1)
			got := runLogitsTopK(t, d, hf, eb, rows, hidden, vocab, k, c.slice)

			logits, abs := refGEMM(hd, rows, hidden, ed, vocab, true)
			u := 1.0 / (1 << 24)
			maxB, spread := 0.0, 0.0
			for i := range abs {
				maxB = math.Max(maxB, float64(hidden+1)*u*abs[i])
			}
			wantLSE := must(host.LogSumExp(logits, rows, vocab)).T(t)
			wantIDs, wantLogp, err := host.TopK(logits, rows, vocab, k)
			if err != nil {
				t.Fatal(err)
			}
			for r := 0; r < rows; r++ {
				row := logits[r*vocab : (r+1)*vocab]
				mn, mx := row[0], row[0]
				for _, v := range row {
					mn, mx = math.Min(mn, v), math.Max(mx, v)
				}
				spread = math.Max(spread, mx-mn)
			}
			slices := 1.0
			if c.slice > 0 {
				slices = math.Ceil(float64(vocab) / float64(c.slice))
			}
			maxLSE := 0.0
			for _, v := range wantLSE {
				maxLSE = math.Max(maxLSE, math.Abs(v))
			}
			lseTol := maxB + (3+2*spread+float64(vocab)/128+7+slices+3)*2*u + 1.0/(1<<21) + 3*2*u*maxLSE
			lseErr := checkClose(t, "lse", got.lse, wantLSE, lseTol, 0)
			maxLogpErr := 0.0
			for r := 0; r < rows; r++ {
				seen := map[uint32]bool{}
				for j := 0; j < k; j++ {
					id := got.ids[r*k+j]
					if id >= uint32(vocab) || seen[id] {
						t.Fatalf("row %d rank %d: id %d out of range or repeated", r, j, id)
					}
					seen[id] = true
					hv := logits[r*vocab+int(id)]
					if wv := logits[r*vocab+wantIDs[r*k+j]]; math.Abs(hv-wv) > 2*maxB {
						t.Errorf("row %d rank %d: id %d (logit %.7g), host id %d (logit %.7g)", r, j, id, hv, wantIDs[r*k+j], wv)
					}
					// The GPU's logp for its own id, and against the host's rank-j logp.
					e := math.Abs(float64(got.logp[r*k+j]) - (hv - wantLSE[r]))
					maxLogpErr = math.Max(maxLogpErr, e)
					if e > maxB+lseTol || math.Abs(float64(got.logp[r*k+j])-wantLogp[r*k+j]) > 3*maxB+lseTol {
						t.Errorf("row %d rank %d: logp %g, want %g (host rank %d: %g)", r, j, got.logp[r*k+j], hv-wantLSE[r], j, wantLogp[r*k+j])
					}
				}
			}
			t.Logf("lse max |err| %.3g (tol %.3g); logp max |err| %.3g (tol %.3g)", lseErr, lseTol, maxLogpErr, maxB+lseTol)
		})
	}
}

// TestLogitsTopKTies: E built from 4 distinct rows repeated, so many logits are exactly
// equal (same f16 row, same h, same arithmetic); ids must come out exactly as host.TopK
// orders them — descending, ties by lower id — across slice boundaries.
func TestLogitsTopKTies(t *testing.T) {
	eachTopKForm(t, func(t *testing.T, d *gpu.Device) {
		rng := rand.New(rand.NewPCG(15, 16))
		for _, slice := range []int{128, 1536} { // filtered pool; unfiltered first slice
			t.Run(fmt.Sprint(slice), func(t *testing.T) { testTies(t, d, rng, slice) })
		}
	})
}

func testTies(t *testing.T, d *gpu.Device, rng *rand.Rand, slice int) {
	rows, hidden, vocab, k := 2, 12, 1600, 40
	hf, hd := randF32(rng, rows*hidden, 1)
	base, baseD := randF16(rng, 4*hidden, 1)
	eb := make([]uint16, vocab*hidden)
	ed := make([]float64, vocab*hidden)
	for v := 0; v < vocab; v++ {
		src := (v * 7 % 11) % 4
		copy(eb[v*hidden:(v+1)*hidden], base[src*hidden:(src+1)*hidden])
		copy(ed[v*hidden:(v+1)*hidden], baseD[src*hidden:(src+1)*hidden])
	}
	got := runLogitsTopK(t, d, hf, eb, rows, hidden, vocab, k, slice)
	logits, _ := refGEMM(hd, rows, hidden, ed, vocab, true)
	wantIDs, _, err := host.TopK(logits, rows, vocab, k)
	if err != nil {
		t.Fatal(err)
	}
	for i := range wantIDs {
		if int(got.ids[i]) != wantIDs[i] {
			t.Fatalf("rank %d of row %d: id %d, want %d (ties must go to the lower id)", i%k, i/k, got.ids[i], wantIDs[i])
		}
	}
}

func TestLogitsTopKErrors(t *testing.T) {
	d := gputest.Open(t)
	h := must(d.NewBuffer("h", gpu.F32, 2, 8)).T(t)
	e := must(d.NewBuffer("E", gpu.F16, 100, 8)).T(t)
	lse := must(d.NewBuffer("lse", gpu.F32, 2)).T(t)
	ids := must(d.NewBuffer("ids", gpu.U32, 2, 5)).T(t)
	logp := must(d.NewBuffer("logp", gpu.F32, 2, 5)).T(t)
	defer func() {
		for _, b := range []*gpu.Buffer{h, e, lse, ids, logp} {
			b.Release()
		}
	}()
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"k > 64":         gpu.LogitsTopK(r, h, e, gpu.LogitsDims{Rows: 2, Hidden: 8, Vocab: 100, K: 65, SliceRows: 0}, lse, ids, logp),
		"k mismatch":     gpu.LogitsTopK(r, h, e, gpu.LogitsDims{Rows: 2, Hidden: 8, Vocab: 100, K: 4, SliceRows: 0}, lse, ids, logp),
		"bad slice":      gpu.LogitsTopK(r, h, e, gpu.LogitsDims{Rows: 2, Hidden: 8, Vocab: 100, K: 5, SliceRows: 100}, lse, ids, logp),
		"wrong vocab":    gpu.LogitsTopK(r, h, e, gpu.LogitsDims{Rows: 2, Hidden: 8, Vocab: 99, K: 5, SliceRows: 0}, lse, ids, logp),
		"ids as f32":     gpu.LogitsTopK(r, h, e, gpu.LogitsDims{Rows: 2, Hidden: 8, Vocab: 100, K: 5, SliceRows: 0}, lse, logp, ids),
		"lse wrong size": gpu.LogitsTopK(r, h, e, gpu.LogitsDims{Rows: 2, Hidden: 8, Vocab: 100, K: 5, SliceRows: 0}, h, ids, logp),
		"ids aliases":    gpu.LogitsTopK(r, h, e, gpu.LogitsDims{Rows: 2, Hidden: 8, Vocab: 100, K: 5, SliceRows: 0}, lse, ids, ids),
	})
}

// TestLogitsTopKRankBitIdentical: the workgroup merge's rank form and its rounds-only twin
// select the same elements in the same order and copy their logits, so ids, log-probabilities
// and lse must agree bit for bit; the ids must also be host.TopK's. Inputs with many exactly
// equal logits (few distinct E rows; hidden 1 with h ∈ {0, ±1, ½} and E from {−1, 0, ½, 1},
// whose logits are exact), vocabularies that are no multiple of the workgroup, k = 1, k =
// vocab, and rows whose candidates fill the rank form exactly (old list k + pool = 256:
// all-equal logits, where the pool is the whole slice), overflow it by one (the rounds then
// run inside the rank form), or overflow the pool (the rounds scan the slice).
func TestLogitsTopKRankBitIdentical(t *testing.T) {
	d := gputest.Open(t)
	defer gpu.SetLogitsTopKLanes(-1)()
	rng := rand.New(rand.NewPCG(17, 18))
	for _, c := range []struct {
		name                              string
		rows, hidden, vocab, k, slice, nE int // nE > 0: E repeats nE random rows; 0: exact
	}{
		{"ties", 3, 12, 1000, 40, 128, 4},
		{"ties-one-slice", 2, 12, 1000, 40, 0, 3},
		{"ties-k1", 2, 7, 333, 1, 128, 2},
		{"k1", 2, 9, 77, 1, 0, 0},
		{"one-column-per-thread", 3, 16, 120, 10, 0, 120},
		{"k=vocab", 4, 1, 64, 64, 128, 0},
		{"rank-full", 4, 1, 192, 64, 0, 0},     // row h = 0: 64 + 192 = 256 candidates
		{"rank-over", 4, 1, 193, 64, 0, 0},     // row h = 0: 257
		{"pool-over", 4, 1, 1600, 64, 1536, 0}, // row h = 0: 1536 pooled > 1024
		{"exact-slices", 4, 1, 1000, 33, 128, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, hidden, vocab, k := c.rows, c.hidden, c.vocab, c.k
			var hf []float32
			var hd, ed []float64
			var eb []uint16
			if c.nE > 0 {
				hf, hd = randF32(rng, rows*hidden, 1)
				base, baseD := randF16(rng, c.nE*hidden, 1)
				eb, ed = make([]uint16, vocab*hidden), make([]float64, vocab*hidden)
				for v := 0; v < vocab; v++ {
					src := rng.IntN(c.nE)
					copy(eb[v*hidden:(v+1)*hidden], base[src*hidden:(src+1)*hidden])
					copy(ed[v*hidden:(v+1)*hidden], baseD[src*hidden:(src+1)*hidden])
				}
			} else {
				hs := []float32{0, 1, -1, 0.5}
				hf, hd = make([]float32, rows*hidden), make([]float64, rows*hidden)
				for i := range hf {
					hf[i] = hs[(i/hidden)%len(hs)]
					hd[i] = float64(hf[i])
				}
				es := []float32{-1, 0, 0.5, 1}
				eb, ed = make([]uint16, vocab*hidden), make([]float64, vocab*hidden)
				for i := range eb {
					x := es[rng.IntN(len(es))]
					eb[i] = float16.Fromfloat32(x).Bits()
					ed[i] = float64(x)
				}
			}
			var got [2]topkResult
			for i, rounds := range []bool{false, true} {
				restore := gpu.SetLogitsTopKRounds(rounds)
				got[i] = runLogitsTopK(t, d, hf, eb, rows, hidden, vocab, k, c.slice)
				restore()
			}
			rank, rounds := got[0], got[1]
			for i := range rank.ids {
				if rank.ids[i] != rounds.ids[i] || math.Float32bits(rank.logp[i]) != math.Float32bits(rounds.logp[i]) {
					t.Fatalf("row %d rank %d: rank form (%d, %g), rounds (%d, %g)", i/k, i%k, rank.ids[i], rank.logp[i], rounds.ids[i], rounds.logp[i])
				}
			}
			for i := range rank.lse {
				if math.Float32bits(rank.lse[i]) != math.Float32bits(rounds.lse[i]) {
					t.Fatalf("row %d: lse %g (rank form), %g (rounds)", i, rank.lse[i], rounds.lse[i])
				}
			}
			logits, _ := refGEMM(hd, rows, hidden, ed, vocab, true)
			wantIDs, _, err := host.TopK(logits, rows, vocab, k)
			if err != nil {
				t.Fatal(err)
			}
			for i := range wantIDs {
				if int(rank.ids[i]) != wantIDs[i] {
					t.Fatalf("row %d rank %d: id %d, host %d", i/k, i%k, rank.ids[i], wantIDs[i])
				}
			}
		})
	}
}

// BenchmarkLogitsTopK profiles LogitsTopK once per merge form (rank, rounds, and lanes where
// the device has a probed subgroup size) and reports the merge kernel's GPU time per
// dispatch (merge-gpu-µs/call; TOPKROW lines give every kernel's). With NVG_BENCH_LARGE=1
// the teacher's head: rows = 8 windows × 512 tokens, hidden 1024, vocab 248320, k 32 in the
// automatic slices (4096 vocabulary rows where the scratch cap binds: 61 merges per call);
// else 64 rows, hidden 64, vocab 4000, k 32 in slices of 512, which runs in seconds on
// lavapipe. NVG_BENCH_SLICE sets the vocabulary slice (a multiple of 128). E is random f16 (distinct logits, as a trained head gives). The rank and
// rounds forms' ids and log-probabilities are compared bit for bit at the end. Needs
// timestamp queries. Run with -benchtime 20x.
func BenchmarkLogitsTopK(b *testing.B) {
	d := gputest.Open(b)
	if err := d.SetProfiling(true); err != nil {
		b.Skip(err)
	}
	defer d.SetProfiling(false)
	dims := gpu.LogitsDims{Rows: 64, Hidden: 64, Vocab: 4000, K: 32, SliceRows: 512}
	if os.Getenv("NVG_BENCH_LARGE") != "" {
		dims = gpu.LogitsDims{Rows: 4096, Hidden: 1024, Vocab: 248320, K: 32}
	}
	if v := os.Getenv("NVG_BENCH_SLICE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("NVG_BENCH_SLICE=%q: %v", v, err)
		}
		dims.SliceRows = n
	}
	rng := rand.New(rand.NewPCG(19, 20))
	eb := make([]uint16, dims.Vocab*dims.Hidden)
	for i := 0; i < len(eb); i += 4 {
		// Four random binary16 values in ±[2⁻⁶, 2⁻²) per draw: sign, exponent 9..12, mantissa.
		u := rng.Uint64()
		for j := 0; j < 4 && i+j < len(eb); j++ {
			w := uint16(u >> (16 * j))
			eb[i+j] = w&0x83ff | (9+(w>>10)&3)<<10
		}
	}
	h := must(d.UploadFloat32("h", benchRandom(rng, dims.Rows*dims.Hidden), dims.Rows, dims.Hidden)).T(b)
	e := must(d.UploadF16("E", eb, dims.Vocab, dims.Hidden)).T(b)
	lse := must(d.NewBuffer("lse", gpu.F32, dims.Rows)).T(b)
	ids := must(d.NewBuffer("ids", gpu.U32, dims.Rows, dims.K)).T(b)
	logp := must(d.NewBuffer("logp", gpu.F32, dims.Rows, dims.K)).T(b)
	defer func() {
		for _, buf := range []*gpu.Buffer{h, e, lse, ids, logp} {
			buf.Release()
		}
	}()
	run := func() {
		if err := d.Run(func(r *gpu.Recorder) error { return gpu.LogitsTopK(r, h, e, dims, lse, ids, logp) }); err != nil {
			b.Fatal(err)
		}
	}
	var first *topkResult // the rank form's outputs
	for _, f := range topkForms {
		b.Run(fmt.Sprintf("rows=%d/%s", dims.Rows, f.name), func(b *testing.B) {
			if f.lanes > 0 && gpu.LogitsTopKLanesSize(d) == 0 {
				b.Skipf("the lane-blocked merge needs a probed subgroup size; %s has none", d.Info().Name)
			}
			defer gpu.SetLogitsTopKLanes(f.lanes)()
			defer gpu.SetLogitsTopKRounds(f.rounds)()
			benchProfiled(b, d, run)
			for _, k := range d.Profile() {
				us := float64(k.Total.Nanoseconds()) / 1e3 / float64(max(k.Calls, 1))
				fmt.Printf("TOPKROW form=%-6s rows=%d vocab=%d k=%d kernel=%-20s calls=%4d mean_us=%9.1f total_ms=%8.2f\n",
					f.name, dims.Rows, dims.Vocab, dims.K, k.Name, k.Calls, us, float64(k.Total.Nanoseconds())/1e6)
				if k.Name == "LogitsTopK.merge" {
					b.ReportMetric(us, "merge-gpu-µs/call")
				}
			}
			if f.lanes > 0 {
				return
			}
			got := topkResult{must(d.ReadFloat32(lse)).T(b), must(d.ReadUint32(ids)).T(b), must(d.ReadFloat32(logp)).T(b)}
			if first == nil {
				first = &got
				return
			}
			for i := range got.ids {
				if got.ids[i] != first.ids[i] || math.Float32bits(got.logp[i]) != math.Float32bits(first.logp[i]) {
					b.Fatalf("row %d rank %d: %s (%d, %g), rank form (%d, %g)", i/dims.K, i%dims.K, f.name, got.ids[i], got.logp[i], first.ids[i], first.logp[i])
				}
			}
		})
	}
}

// TestLogitsTopKPart: the head fed in parts of whole slices (a streamed head: each part in a
// buffer of its own and a submit of its own, the running state carried in a caller's buffer)
// gives the same bits as one LogitsTopK over the whole head, in every merge form; the parts
// include a ragged last one (vocabularies that are no multiple of the part, nor of 128), and
// one part (the whole head). Misaligned or out-of-range parts are refused before anything is
// recorded.
func TestLogitsTopKPart(t *testing.T) {
	eachTopKForm(t, func(t *testing.T, d *gpu.Device) {
		rng := rand.New(rand.NewPCG(21, 22))
		for _, c := range []struct{ rows, hidden, vocab, k, slice, part int }{
			{3, 45, 1000, 64, 128, 256},  // parts 256, 256, 256, 232 (slices 128…, last 104)
			{2, 16, 1300, 8, 256, 768},   // parts 768, 532
			{4, 8, 640, 5, 128, 128},     // one slice per part, the last exactly full
			{2, 12, 333, 1, 0, 333},      // auto slice (the whole vocabulary), one part
			{2, 8, 2000, 16, 1536, 1536}, // a slice larger than the merge pool; parts 1536, 464
		} {
			t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
				rows, hidden, vocab, k := c.rows, c.hidden, c.vocab, c.k
				hf, _ := randF32(rng, rows*hidden, 1)
				eb, _ := randF16(rng, vocab*hidden, 1)
				want := runLogitsTopK(t, d, hf, eb, rows, hidden, vocab, k, c.slice)
				dims := gpu.LogitsDims{Rows: rows, Hidden: hidden, Vocab: vocab, K: k, SliceRows: c.slice}
				h := must(d.UploadFloat32("h", hf, rows, hidden)).T(t)
				lse := must(d.NewBuffer("lse", gpu.F32, rows)).T(t)
				ids := must(d.NewBuffer("ids", gpu.U32, rows, k)).T(t)
				logp := must(d.NewBuffer("logp", gpu.F32, rows, k)).T(t)
				state := must(d.NewBuffer("state", gpu.F32, rows, 2)).T(t)
				defer func() {
					for _, b := range []*gpu.Buffer{h, lse, ids, logp, state} {
						b.Release()
					}
				}()
				parts := 0
				for v0 := 0; v0 < vocab; v0 += c.part {
					n := min(c.part, vocab-v0)
					e := must(d.UploadF16("E part", eb[v0*hidden:(v0+n)*hidden], n, hidden)).T(t)
					err := d.Run(func(r *gpu.Recorder) error {
						return gpu.LogitsTopKPart(r, h, e, dims, gpu.LogitsPart{V0: v0, Rows: n, State: state}, lse, ids, logp)
					})
					e.Release()
					if err != nil {
						t.Fatal(err)
					}
					parts++
				}
				got := topkResult{must(d.ReadFloat32(lse)).T(t), must(d.ReadUint32(ids)).T(t), must(d.ReadFloat32(logp)).T(t)}
				for i := range want.ids {
					if got.ids[i] != want.ids[i] || math.Float32bits(got.logp[i]) != math.Float32bits(want.logp[i]) {
						t.Fatalf("row %d rank %d: %d parts give (%d, %g), LogitsTopK (%d, %g)", i/k, i%k, parts, got.ids[i], got.logp[i], want.ids[i], want.logp[i])
					}
				}
				for i := range want.lse {
					if math.Float32bits(got.lse[i]) != math.Float32bits(want.lse[i]) {
						t.Fatalf("row %d: lse %g in %d parts, %g whole", i, got.lse[i], parts, want.lse[i])
					}
				}
			})
		}
	})
	d := gputest.Open(t)
	h := must(d.NewBuffer("h", gpu.F32, 2, 8)).T(t)
	e := must(d.NewBuffer("E", gpu.F16, 256, 8)).T(t)
	lse := must(d.NewBuffer("lse", gpu.F32, 2)).T(t)
	ids := must(d.NewBuffer("ids", gpu.U32, 2, 5)).T(t)
	logp := must(d.NewBuffer("logp", gpu.F32, 2, 5)).T(t)
	state := must(d.NewBuffer("state", gpu.F32, 2, 2)).T(t)
	e200 := must(d.NewBuffer("E", gpu.F16, 200, 8)).T(t)
	defer func() {
		for _, b := range []*gpu.Buffer{h, e, e200, lse, ids, logp, state} {
			b.Release()
		}
	}()
	dims := gpu.LogitsDims{Rows: 2, Hidden: 8, Vocab: 1000, K: 5, SliceRows: 128}
	// The slice the parts must align to: the one given, else the largest within the limits,
	// capped at the vocabulary.
	for _, c := range []struct{ slice, vocab, want int }{{128, 1000, 128}, {0, 1000, 1000}, {1536, 1000, 1000}, {100, 1000, -1}} {
		got, err := d.LogitsSliceRows(gpu.LogitsDims{Rows: 2, Hidden: 8, Vocab: c.vocab, SliceRows: c.slice}, gpu.F16)
		if c.want < 0 && err == nil || c.want >= 0 && (err != nil || got != c.want) {
			t.Errorf("LogitsSliceRows(slice %d, vocab %d) = %d, %v; want %d", c.slice, c.vocab, got, err, c.want)
		}
	}
	part := func(v0, n int, st *gpu.Buffer) gpu.LogitsPart { return gpu.LogitsPart{V0: v0, Rows: n, State: st} }
	r := d.Begin()
	defer r.Discard()
	checkErrors(t, r, map[string]error{
		"nil state":         gpu.LogitsTopKPart(r, h, e, dims, part(0, 256, nil), lse, ids, logp),
		"state wrong size":  gpu.LogitsTopKPart(r, h, e, dims, part(0, 256, lse), lse, ids, logp),
		"state aliases":     gpu.LogitsTopKPart(r, h, e, dims, part(0, 256, logp), lse, ids, logp),
		"start misaligned":  gpu.LogitsTopKPart(r, h, e, dims, part(64, 256, state), lse, ids, logp),
		"end misaligned":    gpu.LogitsTopKPart(r, h, e200, dims, part(0, 200, state), lse, ids, logp),
		"beyond vocabulary": gpu.LogitsTopKPart(r, h, e, dims, part(896, 256, state), lse, ids, logp),
		"E not the part's":  gpu.LogitsTopKPart(r, h, e, dims, part(0, 128, state), lse, ids, logp),
	})
}
