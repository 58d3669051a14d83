package gpu

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// specValues reads back every specialization constant of a module: SpecId → value (bools
// as 0/1), and the LocalSize execution mode.
func specValues(t *testing.T, w []uint32) (map[uint32]uint32, [3]uint32) {
	t.Helper()
	specOf := map[uint32]uint32{}
	vals := map[uint32]uint32{}
	var ls [3]uint32
	for pass := range 2 {
		for i := 5; i < len(w); {
			n := int(w[i] >> 16)
			op := w[i] & 0xffff
			switch {
			case pass == 0 && op == opDecorate && n == 4 && w[i+2] == decorationSpecID:
				specOf[w[i+1]] = w[i+3]
			case pass == 1 && op == opSpecConstant:
				if id, ok := specOf[w[i+2]]; ok {
					vals[id] = w[i+3]
				}
			case pass == 1 && (op == opSpecConstantTrue || op == opSpecConstantFalse):
				if id, ok := specOf[w[i+2]]; ok {
					vals[id] = map[uint32]uint32{opSpecConstantTrue: 1, opSpecConstantFalse: 0}[op]
				}
			case pass == 1 && op == opExecutionMode && n == 6 && w[i+2] == executionModeLocalSz:
				copy(ls[:], w[i+3:i+6])
			}
			i += n
		}
	}
	return vals, ls
}

// TestSPIRVSpecialize patches committed kernels and reads the result back: the entry point
// renamed (a longer and a shorter name than "main"), every SpecId set (numbers and both
// bools), LocalSize set, every other instruction unchanged; and the errors. The kernels:
// coopmat_gemm.comp's variant with the most bindings (SpecIds specSG … specAccum) and its
// QUANT variant (those and specQFP8 … specQBC).
func TestSPIRVSpecialize(t *testing.T) {
	var raw []byte
	var w []uint32
	for _, c := range []struct {
		file  string
		ids   int      // SpecIds 0 … ids−1
		bools []uint32 // the bool ones
	}{
		{coopBLRScaleRaw.File, specAccum + 1, []uint32{specTransB, specAccum}},
		{coopQuantFile, specQBC + 1, []uint32{specTransB, specAccum, specQFP8, specQF16}},
	} {
		var err error
		if raw, err = coopFS.ReadFile("coopmat/" + c.file); err != nil {
			t.Fatal(err)
		}
		if w, err = spirvWords(raw); err != nil {
			t.Fatal(err)
		}
		if name, err := spirvEntryName(w); err != nil || name != "main" {
			t.Fatalf("%s: committed entry point %q, %v; want main", c.file, name, err)
		}
		orig, _ := specValues(t, w)
		if len(orig) != c.ids {
			t.Fatalf("%s declares SpecIds %v, want 0…%d", c.file, orig, c.ids-1)
		}
		for _, entry := range []string{"nvgcm_a_rather_long_entry_point_name_x", "nvgcm"} {
			want := map[uint32]uint32{}
			for id := range orig {
				want[id] = orig[id] + 3 + id
			}
			for _, id := range c.bools {
				want[id] = 1 - orig[id]
			}
			got, err := spirvSpecialize(w, spirvSpec{Entry: entry, Values: want, LocalSize: [3]uint32{96, 1, 1}})
			if err != nil {
				t.Fatal(err)
			}
			if name, err := spirvEntryName(got); err != nil || name != entry {
				t.Errorf("%s: entry point %q, %v; want %q", c.file, name, err, entry)
			}
			vals, ls := specValues(t, got)
			for id, v := range want {
				if vals[id] != v {
					t.Errorf("%s: SpecId %d = %d, want %d", c.file, id, vals[id], v)
				}
			}
			if ls != [3]uint32{96, 1, 1} {
				t.Errorf("%s: LocalSize %v, want [96 1 1]", c.file, ls)
			}
			// Apart from the entry point, the same number of words, and the header unchanged.
			d := len(spirvEncodeString(entry)) - len(spirvEncodeString("main"))
			if len(got) != len(w)+d || !slices.Equal(got[:5], w[:5]) {
				t.Errorf("%s: %d words (want %d), header %x (want %x)", c.file, len(got), len(w)+d, got[:5], w[:5])
			}
			if back, err := spirvSpecialize(got, spirvSpec{Entry: "main", Values: orig, LocalSize: [3]uint32{64, 1, 1}}); err != nil || !slices.Equal(back, w) {
				t.Errorf("%s: specialising back to the committed values does not give the committed module (err %v)", c.file, err)
			}
		}
	}
	if _, err := spirvSpecialize(w, spirvSpec{Values: map[uint32]uint32{99: 1}}); err == nil || !strings.Contains(err.Error(), "SpecId 99") {
		t.Errorf("unknown SpecId: err %v", err)
	}
	if _, err := spirvWords(raw[:len(raw)-2]); err == nil {
		t.Error("a truncated module was accepted")
	}
	bad := append([]byte(nil), raw...)
	bad[0] ^= 1
	if _, err := spirvWords(bad); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("bad magic: err %v", err)
	}
	if _, err := spirvSpecialize(append(append([]uint32(nil), w[:5]...), 0), spirvSpec{}); err == nil {
		t.Error("a zero-length instruction was accepted")
	}
}

// loopMerges counts a module's OpLoopMerge instructions and those with the Unroll hint.
func loopMerges(w []uint32) (all, unroll int) {
	for i := 5; i < len(w); i += int(w[i] >> 16) {
		if w[i]&0xffff == opLoopMerge {
			all++
			if w[i+3]&loopControlUnroll != 0 {
				unroll++
			}
		}
	}
	return all, unroll
}

// TestSPIRVRoll: every committed cooperative-matrix kernel carries [[unroll]] loops (the
// hint that keeps their arrays of cooperative matrices in registers on GPUs; a kernel
// regenerated without it would run at a fraction of its speed), and spirvSpecialize with Roll
// (CPU adapters) clears the hint of every loop and changes nothing else.
func TestSPIRVRoll(t *testing.T) {
	for _, f := range coopFiles() {
		raw, err := coopFS.ReadFile("coopmat/" + f)
		if err != nil {
			t.Fatal(err)
		}
		w, err := spirvWords(raw)
		if err != nil {
			t.Fatal(err)
		}
		all, unroll := loopMerges(w)
		if unroll == 0 {
			t.Errorf("%s: none of its %d loops carries the Unroll hint", f, all)
		}
		got, err := spirvSpecialize(w, spirvSpec{Roll: true})
		if err != nil {
			t.Fatal(err)
		}
		if a, u := loopMerges(got); a != all || u != 0 {
			t.Errorf("%s rolled: %d loops, %d with Unroll; want %d, 0", f, a, u, all)
		}
		diff := 0
		for i := range w {
			if i >= len(got) || got[i] != w[i] {
				diff++
			}
		}
		if len(got) != len(w) || diff != unroll {
			t.Errorf("%s rolled: %d words (want %d), %d changed (want %d: the loops' controls)", f, len(got), len(w), diff, unroll)
		}
	}
}

// TestCoopmatSPIRVFresh: every committed .spv is the one gpu/coopmat/generate.sh made from
// the current GLSL source (spv.sum records per variant its source, the hash of source and
// flags, and of the SPIR-V). A failure means a .comp changed without `go generate ./gpu`, or
// a .spv was edited by hand.
func TestCoopmatSPIRVFresh(t *testing.T) {
	sum, err := coopFS.ReadFile("coopmat/spv.sum")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(sum))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		f := strings.SplitN(line, " ", 5)
		if len(f) != 5 {
			t.Fatalf("spv.sum line %q: want file, source, source hash, SPIR-V hash, flags", line)
		}
		name, source, srcH, spvH, flags := f[0], f[1], f[2], f[3], f[4]
		src, err := coopFS.ReadFile("coopmat/" + source)
		if err != nil {
			t.Fatalf("spv.sum: %s's source: %v", name, err)
		}
		h := sha256.Sum256(append(append(append([]byte(nil), src...), 0), flags...))
		if hex.EncodeToString(h[:]) != srcH {
			t.Errorf("%s is stale: %s (flags %q) changed since it was generated; run go generate ./gpu", name, source, flags)
		}
		spv, err := coopFS.ReadFile("coopmat/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(spv); hex.EncodeToString(h[:]) != spvH {
			t.Errorf("%s differs from what generate.sh wrote", name)
		}
		seen[name] = true
	}
	for _, f := range coopFiles() {
		if !seen[f] {
			t.Errorf("spv.sum has no line for %s", f)
		}
	}
}

// TestPickCoopType: 16×16×16 f16→f32 wins (NVIDIA lists it beside others); else the smallest
// usable shape (lavapipe's 8×8×8); none without an f16→f32 subgroup shape.
func TestPickCoopType(t *testing.T) {
	mk := func(m, n, k int, a, c, scope string) CoopType {
		return CoopType{M: m, N: n, K: k, A: a, B: a, C: c, Result: c, Scope: scope}
	}
	nv := []CoopType{mk(16, 8, 16, "f16", "f16", "subgroup"), mk(16, 8, 8, "f16", "f32", "subgroup"),
		mk(16, 16, 16, "f16", "f32", "subgroup"), mk(16, 8, 32, "s8", "s32", "subgroup")}
	if c, ok := pickCoopType(nv); !ok || c != nv[2] {
		t.Errorf("NVIDIA-like list: got %v %v, want %v", c, ok, nv[2])
	}
	lvp := []CoopType{mk(8, 8, 8, "f16", "f16", "subgroup"), mk(8, 8, 8, "f16", "f32", "subgroup")}
	if c, ok := pickCoopType(lvp); !ok || c != lvp[1] {
		t.Errorf("lavapipe list: got %v %v, want %v", c, ok, lvp[1])
	}
	if c, ok := pickCoopType([]CoopType{mk(16, 16, 16, "f16", "f16", "subgroup"), mk(16, 16, 16, "f16", "f32", "workgroup")}); ok {
		t.Errorf("no usable shape: got %v", c)
	}
}

// TestParseCoopTile: NVG_COOPMAT_TILE's syntax and the tile checks.
func TestParseCoopTile(t *testing.T) {
	tl, err := parseCoopTile("128x64x32/4x2")
	if err != nil || tl != (coopTile{128, 64, 32, 4, 2}) {
		t.Fatalf("got %v, %v", tl, err)
	}
	for _, bad := range []string{"128x128x32", "128x128/2x4", "ax1x1/1x1", "0x1x1/1x1"} {
		if _, err := parseCoopTile(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	s16 := CoopType{M: 16, N: 16, K: 16}
	info := Info{MaxInvocations: 1024, MaxWorkgroupStorage: 48 << 10}
	for _, c := range []struct {
		t  coopTile
		ok bool
	}{{coopTile{128, 128, 32, 2, 4}, true}, {coopTile{64, 64, 32, 2, 2}, true}, {coopTile{128, 128, 32, 3, 4}, false},
		{coopTile{128, 128, 24, 2, 4}, false}, {coopTile{256, 256, 64, 2, 4}, false}} {
		if err := c.t.check(s16, 32, info); (err == nil) != c.ok {
			t.Errorf("%v: err %v, want ok=%v", c.t, err, c.ok)
		}
	}
}

// TestCoopTileFor: on a GPU with NVIDIA's 16×16×16 shape at subgroup 32 and 48 KiB of
// workgroup memory, every block coopTileFor may choose passes the kernel's checks, and the
// choice follows the workgroup counts (a 0.8B MLP GEMM, a BLR rank-384 GEMM (96 blocks), small
// ones: 8 × 7 and 1 blocks of 128×128);
// a CPU adapter (lavapipe's 8×8×8 at subgroup 8) and NVG_COOPMAT_TILE get one block each.
func TestCoopTileFor(t *testing.T) {
	s16 := CoopType{M: 16, N: 16, K: 16}
	gpu := &Device{tc: TensorCores{Shape: s16, SubgroupSize: 32}, info: Info{MaxInvocations: 1024, MaxWorkgroupStorage: 48 << 10}}
	for _, r := range gpu.coopTileRules() {
		if err := r.t.check(s16, 32, gpu.info); err != nil {
			t.Errorf("GPU rule %v: %v", r.t, err)
		}
	}
	for _, c := range []struct {
		m, n int
		want coopTile
	}{{4096, 3584, coopTile{128, 128, 64, 2, 4}}, {4096, 1024, coopTile{128, 128, 64, 2, 4}},
		{4096, 384, coopTile{128, 128, 64, 2, 4}}, {384, 4096, coopTile{128, 128, 64, 2, 4}},
		{64, 8448, coopTile{128, 128, 64, 2, 4}}, {1024, 896, coopTile{64, 64, 64, 2, 2}}, {100, 100, coopTile{64, 64, 64, 2, 2}}} {
		if got := gpu.coopTileFor(c.m, c.n, 0); got != c.want {
			t.Errorf("GPU %d×%d: %v, want %v", c.m, c.n, got, c.want)
		}
	}
	s8 := CoopType{M: 8, N: 8, K: 8}
	cpu := &Device{tc: TensorCores{Shape: s8, SubgroupSize: 8}, info: Info{CPU: true, MaxInvocations: 1024, MaxWorkgroupStorage: 32 << 10}}
	if got, want := cpu.coopTileFor(4096, 4096, 0), (coopTile{32, 32, 16, 2, 2}); got != want {
		t.Errorf("CPU: %v, want %v", got, want)
	}
	old := coopTileForce
	defer func() { coopTileForce = old }()
	coopTileForce = coopTile{128, 64, 32, 4, 2}
	if rules := gpu.coopTileRules(); len(rules) != 1 || gpu.coopTileFor(4096, 4096, 0) != coopTileForce {
		t.Errorf("NVG_COOPMAT_TILE: rules %v", rules)
	}
}

// TestCoopQuantPlan: the 8-bit GEMM takes coopQuantBlock where it makes ≥ 1024 workgroups on a
// GPU (9B's and 4B's gate shapes), the dense GEMM's block below that (0.8B's gate), the next
// block that fits the workgroup memory with the row powers of two, or none; a forced block
// keeps the dense rule.
func TestCoopQuantPlan(t *testing.T) {
	s16 := CoopType{M: 16, N: 16, K: 16}
	gpu := &Device{tc: TensorCores{Shape: s16, SubgroupSize: 32}, info: Info{MaxInvocations: 1024, MaxWorkgroupStorage: 48 << 10,
		MaxStorageBindingSize: 1 << 30}}
	big := coopTile{128, 128, 64, 2, 4}
	for _, c := range []struct {
		m, k, n int
		want    coopTile
	}{{4096, 4096, 12288, coopQuantBlock}, {4096, 2560, 9216, coopQuantBlock}, {4096, 1024, 3584, big}, {4096, 3584, 1024, big}} {
		got, mp, kp, grid, ok := gpu.coopQuantPlan(c.m, c.k, c.n)
		if !ok || got != c.want || mp%got.BM != 0 || kp%got.BK != 0 || kp < c.k || grid[0]*got.BN < c.n || grid[1]*got.BM != mp {
			t.Errorf("GPU %d×%d×%d: %v (mp %d, kp %d, grid %v, ok %v), want %v", c.m, c.k, c.n, got, mp, kp, grid, ok, c.want)
		}
	}
	small := &Device{tc: gpu.tc, info: gpu.info}
	small.info.MaxWorkgroupStorage = 40 << 10 // the 8-bit block needs 44,800 bytes, 128×128×64 38,912
	if got, _, _, _, ok := small.coopQuantPlan(4096, 4096, 12288); !ok || got != big {
		t.Errorf("40 KiB: %v (ok %v), want %v", got, ok, big)
	}
	small.info.MaxWorkgroupStorage = 37 << 10 // 128×128×64 alone fits, not with 8·BN more
	if got, _, _, _, ok := small.coopQuantPlan(4096, 4096, 12288); !ok || got != (coopTile{64, 64, 64, 2, 2}) {
		t.Errorf("37 KiB: %v (ok %v), want the fallback 64x64x64/2x2", got, ok)
	}
	small.info.MaxWorkgroupStorage = 16 << 10
	if got, _, _, _, ok := small.coopQuantPlan(4096, 4096, 12288); ok {
		t.Errorf("16 KiB: %v, want no plan (no block fits with its row powers of two)", got)
	}
	old := coopTileForce
	defer func() { coopTileForce = old }()
	coopTileForce = coopTile{128, 64, 32, 4, 2}
	if got, _, _, _, _ := gpu.coopQuantPlan(4096, 4096, 12288); got != coopTileForce {
		t.Errorf("NVG_COOPMAT_TILE: %v, want %v", got, coopTileForce)
	}
}

// TestCoopSplitK: the automatic split (4 runs for < 264 blocks over ≥ 96 slices of 64, never
// on a CPU adapter), NVG_COOPMAT_SPLITK's forced S cut so that every run of ⌈ns/S⌉ slices is
// non-empty, and one run for a K of one slice (or none).
func TestCoopSplitK(t *testing.T) {
	b := coopTile{128, 128, 64, 2, 4}
	gpu := &Device{tc: TensorCores{Shape: CoopType{M: 16, N: 16, K: 16}, SubgroupSize: 32}}
	cpu := &Device{tc: gpu.tc, info: Info{CPU: true}}
	for _, c := range []struct {
		d             *Device
		force, groups int
		kp, want      int
	}{
		{gpu, 0, 224, 9216, 4}, {gpu, 0, 264, 9216, 1}, {gpu, 0, 96, 3584, 1}, {gpu, 0, 96, 6144, 4},
		{cpu, 0, 4, 9216, 1}, {gpu, 0, 1, 64, 1}, {gpu, 0, 1, 0, 1},
		{gpu, 3, 1000, 128, 2}, {gpu, 4, 1000, 6 * 64, 3}, {gpu, 64, 1, 5 * 64, 5}, {cpu, 3, 1, 9 * 64, 3},
	} {
		old := coopSplitForce
		coopSplitForce = c.force
		got := c.d.coopSplitK(b, c.groups, c.kp)
		coopSplitForce = old
		if got != c.want {
			t.Errorf("groups %d, kp %d, forced %d (CPU %v): S = %d, want %d", c.groups, c.kp, c.force, c.d.info.CPU, got, c.want)
		}
		// The shader's runs: per = ⌈ns/S⌉ slices each, all S of them non-empty.
		if ns := c.kp / b.BK; got > 1 && (got-1)*((ns+got-1)/got) >= ns {
			t.Errorf("groups %d, kp %d: S = %d leaves run %d empty", c.groups, c.kp, got, got-1)
		}
	}
}

// TestVulkanLayerBuildConcurrent builds the layer into an empty cache from several goroutines
// at once (each compiles into its own temporary directory and renames it into place, as
// several processes would): all get the same complete directory, whose manifest names the
// library beside it, and a later call finds it without compiling.
func TestVulkanLayerBuildConcurrent(t *testing.T) {
	if _, err := cCompiler(); err != nil {
		t.Skipf("no C compiler: %v", err)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	const n = 3
	dirs := make([]string, n)
	errs := make([]error, n)
	done := make(chan int)
	for i := range n {
		go func() { dirs[i], errs[i] = buildLayer(); done <- i }()
	}
	for range n {
		<-done
	}
	for i := range n {
		if errs[i] != nil || dirs[i] != dirs[0] {
			t.Fatalf("build %d: %q, %v (build 0: %q)", i, dirs[i], errs[i], dirs[0])
		}
	}
	if !layerComplete(dirs[0]) {
		t.Fatalf("%s is incomplete", dirs[0])
	}
	man, err := os.ReadFile(filepath.Join(dirs[0], layerManifestName))
	if err != nil || !strings.Contains(string(man), `"./`+layerLibName+`"`) || !strings.Contains(string(man), layerName) {
		t.Errorf("manifest %s (%v)", man, err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(dirs[0]), ".vklayer-build-*"))
	if len(left) != 0 {
		t.Errorf("temporary build directories left behind: %v", left)
	}
	t.Setenv("CC", "/nonexistent/cc") // a cached build needs no compiler
	if d, err := buildLayer(); err != nil || d != dirs[0] {
		t.Errorf("cached build: %q, %v", d, err)
	}
}

// TestListEnv: the layer's path goes before the user's VK_ADD_LAYER_PATH entries, its name
// after the user's VK_INSTANCE_LAYERS, never twice.
func TestListEnv(t *testing.T) {
	t.Setenv("NVG_TEST_LIST", "")
	prependEnv("NVG_TEST_LIST", "/a")
	prependEnv("NVG_TEST_LIST", "/b")
	prependEnv("NVG_TEST_LIST", "/a")
	appendEnv("NVG_TEST_LIST", "L")
	if got := os.Getenv("NVG_TEST_LIST"); got != "/b:/a:L" {
		t.Errorf("got %q, want /b:/a:L", got)
	}
}

// TestCoopDeltaTileFor: the delta rule's sequential kernels take L value columns a
// workgroup on GPUs (16 with NVIDIA's 16×16×16 shape at dk 128, 48 or 32 KiB of workgroup
// memory; 8 with an 8×8×8 one), lavapipe's 2·L on CPU adapters;
// NVG_COOPMAT_DELTA_COLS forces a width and is refused when malformed or not 1, 2 or 4
// times the shape's L, and a forced width that does not fit the device is an error, not a smaller tile.
func TestCoopDeltaTileFor(t *testing.T) {
	s16 := CoopType{M: 16, N: 16, K: 16}
	dev := func(shared uint32, cpu bool, s CoopType, sg int) *Device {
		return &Device{tc: TensorCores{Shape: s, SubgroupSize: sg}, info: Info{MaxInvocations: 1024, MaxWorkgroupStorage: shared, CPU: cpu}}
	}
	for _, c := range []struct {
		d    *Device
		want coopDeltaTile
	}{{dev(48<<10, false, s16, 32), coopDeltaTile{128, 16, 4}}, {dev(32<<10, false, s16, 32), coopDeltaTile{128, 16, 4}},
		{dev(48<<10, false, CoopType{M: 8, N: 8, K: 8}, 8), coopDeltaTile{128, 8, 4}},
		{dev(32<<10, true, CoopType{M: 8, N: 8, K: 8}, 8), coopDeltaTile{128, 16, 4}}} {
		if got, err := c.d.coopDeltaTileFor(128); err != nil || got != c.want {
			t.Errorf("shared %d, CPU %v: %+v, %v; want %+v", c.d.info.MaxWorkgroupStorage, c.d.info.CPU, got, err, c.want)
		}
	}
	for _, bad := range []string{"x", "0", "8", "12", "24", "48", "128", "512"} {
		if _, err := parseCoopDeltaCols(bad, s16); err == nil {
			t.Errorf("NVG_COOPMAT_DELTA_COLS=%q accepted", bad)
		}
	}
	n, err := parseCoopDeltaCols("32", s16)
	if err != nil || n != 32 {
		t.Fatalf("NVG_COOPMAT_DELTA_COLS=32: %d, %v", n, err)
	}
	coopDeltaColsForce = n
	defer func() { coopDeltaColsForce = 0 }()
	if got, err := dev(48<<10, false, s16, 32).coopDeltaTileFor(128); err != nil || got != (coopDeltaTile{128, 32, 4}) {
		t.Errorf("forced 32: %+v, %v", got, err)
	}
	coopDeltaColsForce = 64
	if got, err := dev(48<<10, false, s16, 32).coopDeltaTileFor(128); err == nil {
		t.Errorf("forced 64 (70 KiB at dk 128): %+v accepted on 48 KiB", got)
	}
}
