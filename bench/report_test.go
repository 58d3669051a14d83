package bench_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/bench"
)

// readReport reads an nvg bench JSON file, failing t on an error.
func readReport(t *testing.T, path string) bench.Report {
	t.Helper()
	b, err := os.ReadFile(path)
	var r bench.Report
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

const benchFixture = `{"device": "NVIDIA H200", "driver": "NVIDIA 580.1", "backend": "vulkan", "date": "2026-11-30T18:00:00Z",
 "command": "nvg bench --model 0.8B,27B --json nvg.json", "go_version": "go1.26.8", "peak_tflops": 67, "peak_gbps": 4800,
 "results": [
  {"geom": "0.8B", "nb": 8, "t": 512, "k": 32, "tokens": 4096, "teacher_mode": "resident", "params": 752393024,
   "blr_weights": 600000000, "blr_bits": 480000000, "bits_per_weight": 0.8, "trainables": 4000000, "loss": 3.5,
   "teacher": {"seconds": [0.2, 0.21, 0.19], "median_s": 0.2048, "tok_s": 20000, "peak_bytes": 3221225472, "peak_GiB": 3,
     "profile_ms": 150, "profile": [{"name": "Linear", "calls": 100, "total_ms": 100, "share_pct": 66.7, "tflops": 33.5, "gbps": 1200}]},
   "student": {"seconds": [0.8192], "median_s": 0.8192, "tok_s": 5000, "peak_bytes": 10737418240, "peak_GiB": 10,
     "weight_bytes": 536870912, "profile_ms": 700,
     "profile": [{"name": "BLRForward.y", "calls": 184, "total_ms": 350, "share_pct": 50, "tflops": 6.7, "gbps": 480},
                 {"name": "GatedDeltaRuleBackward", "calls": 18, "total_ms": 350, "share_pct": 50}]}},
  {"geom": "27B", "nb": 8, "t": 512, "k": 32, "tokens": 4096, "teacher_mode": "streamed", "error": "student: out of memory"}
 ]}`

const peerFixture = `Loading...
RESULT {"geom": "0.8B", "tokens": 4096, "teacher_s": 0.13, "teacher_tok_s": 30900, "teacher_peak_GiB": 5.0, "student_step_s": 0.67, "student_tok_s": 6080, "student_peak_GiB": 39.1, "torch": "2.11.0+cu130"}
FAILED 27B OutOfMemoryError('CUDA out of memory') peak_GiB 137.7
`

// TestBenchReport renders the report from a fixed nvg JSON and a fixed peer output; the
// ratios are computed by hand: 20000/30900 = 0.647, 5000/6080 = 0.822, 3/5 = 0.60,
// 10/39.1 = 0.256.
func TestBenchReport(t *testing.T) {
	dir := t.TempDir()
	js, peer, nopeer := filepath.Join(dir, "nvg.json"), filepath.Join(dir, "peer.txt"), filepath.Join(dir, "nopeer.txt")
	for p, s := range map[string]string{js: benchFixture, peer: peerFixture, nopeer: "peer not run: python3 lacks torch\n"} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var md bytes.Buffer
	if err := bench.RenderReport(&md, js, "", peer, js, "", "md"); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"| 0.8B | resident | 20000 | 30900 | 0.65 | 5000 | 6080 | 0.82 | 3.00 | 5.00 | 0.60 | 10.00 | 39.10 | 0.26 |",
		"NVIDIA H200", "NVIDIA 580.1", "torch 2.11.0+cu130", "nvg bench --model 0.8B,27B",
		"- 27B: `OutOfMemoryError('CUDA out of memory') peak_GiB 137.7`",
		"| `BLRForward.y` | 184 | 350.00 | 50.0 % | 6.70 | 10.0 | 480 | 10.0 |",
		"| `GatedDeltaRuleBackward` | 18 | 350.00 | 50.0 % | - | - | - | - |",
		"| `Linear` | 100 | 100.00 | 66.7 % | 33.50 | 50.0 | 1200 | 25.0 |",
		"student: out of memory", "## CPU adapter",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	// --notes: the hand-written targets section lands between the throughput table and the
	// model table; a missing notes file is an error naming the flag.
	notes := filepath.Join(dir, "targets.md")
	if err := os.WriteFile(notes, []byte("## Targets\n\nstudent step 0.82× the peer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	md.Reset()
	if err := bench.RenderReport(&md, js, "", peer, "", notes, "md"); err != nil {
		t.Fatal(err)
	}
	withNotes := md.String()
	iT, iN, iM := strings.Index(withNotes, "## Throughput"), strings.Index(withNotes, "## Targets\n\nstudent step 0.82× the peer\n"), strings.Index(withNotes, "## Models")
	if iT < 0 || iN < iT || iM < iN {
		t.Errorf("notes at %d, want between the throughput table (%d) and the models (%d):\n%s", iN, iT, iM, withNotes)
	}
	if err := bench.RenderReport(&md, js, "", peer, "", filepath.Join(dir, "missing.md"), "md"); err == nil || !strings.Contains(err.Error(), "--notes") {
		t.Errorf("missing notes file: %v, want an error naming --notes", err)
	}
	var txt bytes.Buffer
	if err := bench.RenderReport(&txt, js, "", peer, "", "", "text"); err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(strings.Split(txt.String(), "\n")[1]); len(f) != 13 || f[0] != "0.8B" || f[3] != "0.65" || f[6] != "0.82" || f[9] != "0.60" || f[12] != "0.26" {
		t.Errorf("ratio line %q", f)
	}
	txt.Reset()
	if err := bench.RenderReport(&txt, js, "", nopeer, "", "", "text"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "peer not run: python3 lacks torch: nvg figures only") {
		t.Errorf("no-peer text:\n%s", txt.String())
	}
	md.Reset()
	if err := bench.RenderReport(&md, js, "", nopeer, "", "", "md"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "**not run**") || !strings.Contains(md.String(), "| 0.8B | resident | 20000 | — | — |") {
		t.Errorf("no-peer markdown:\n%s", md.String())
	}
	// Two runs of different geometries merge: the second file's 4B joins the first's rows.
	js2 := filepath.Join(dir, "nvg2.json")
	os.WriteFile(js2, []byte(strings.Replace(strings.Replace(benchFixture, `"geom": "0.8B"`, `"geom": "4B"`, 1), "nvg bench --model 0.8B,27B", "nvg bench --model 4B", 1)), 0o644)
	md.Reset()
	if err := bench.RenderReport(&md, js+","+js2, "", peer+","+nopeer, "", "", "md"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 0.8B | resident | 20000 | 30900 | 0.65 |", "| 4B | resident | 20000 | — | — |", "--model 0.8B,27B --json nvg.json; nvg bench --model 4B"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("merged markdown lacks %q", want)
		}
	}
	// The CPU section alone: the GPU figures pending, rates in GFLOP/s without ceilings.
	md.Reset()
	if err := bench.RenderReport(&md, "", "", "", js, "", "md"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "GPU figures: pending") || !strings.Contains(md.String(), "| `BLRForward.y` | 184 | 350.00 | 50.0 % | 6700.00 | 480.00 |") {
		t.Errorf("pending report:\n%s", md.String())
	}
	// Several runs of the peer (RESULT lines of one geometry, in one file or across files):
	// each figure is their median (neither the first run's nor the last's) — 30900, 35900,
	// 40900 → 35900 and 6080, 7080, 0 (a run without the student) → (6080 + 7080)/2 = 6580;
	// the header lists the runs. Ratios by hand: 20000/35900 = 0.557, 5000/6580 = 0.760.
	peer2 := filepath.Join(dir, "peer2.txt")
	os.WriteFile(peer2, []byte(strings.Replace(strings.Replace(peerFixture, "30900", "35900", 1), "6080", "7080", 1)+
		strings.Replace(strings.Replace(peerFixture, "30900", "40900", 1), `"student_tok_s": 6080`, `"student_tok_s": 0`, 1)), 0o644)
	md.Reset()
	if err := bench.RenderReport(&md, js, "", peer+","+peer2, "", "", "md"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 0.8B | resident | 20000 | 35900 | 0.56 | 5000 | 6580 | 0.76 |",
		"the tables give the median of the peer's runs (0.8B: 3 runs, teacher pass 30900 / 35900 / 40900 tok/s, student step 6080 / 7080 / —)"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("median-of-runs markdown lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(peerFixtureOnce(t, js, peer), "median of the peer's runs") {
		t.Error("a peer that ran once: the header mentions a median")
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("RESULT {not json\n"), 0o644)
	if err := bench.RenderReport(&md, js, "", bad, "", "", "md"); err == nil {
		t.Error("bad RESULT line: no error")
	}
	// A CPU-adapter run is the report's CPU section (--cpu), not its GPU figures.
	cpuJSON := filepath.Join(dir, "cpu.json")
	os.WriteFile(cpuJSON, []byte(strings.Replace(benchFixture, `"backend": "vulkan",`, `"backend": "vulkan", "cpu_adapter": true,`, 1)), 0o644)
	if err := bench.RenderReport(io.Discard, cpuJSON, "", "", "", "", "md"); err == nil || !strings.Contains(err.Error(), "render it with --cpu") {
		t.Errorf("--report of a CPU-adapter run: err = %v", err)
	}
}

// TestBenchReportBefore renders the report with --before. On the committed H200 runs (the
// 0.8B of h200-0.8B-4B.json before, h200-0.8B-packed.json after) the speed-ups and the
// before columns are recomputed here from the two JSON files. On the fixture, a kernel only in
// the new run gets "—" in the before columns, one only in the earlier run is named after the
// table, and an earlier run with no geometry in common leaves every kernel table as it is
// without --before.
func TestBenchReportBefore(t *testing.T) {
	const oldJS, newJS, peerTxt = "../docs/bench/h200-0.8B-4B.json", "../docs/bench/h200-0.8B-packed.json", "../docs/bench/h200-peer-0.8B-4B.txt"
	var md bytes.Buffer
	if err := bench.RenderReport(&md, newJS, oldJS, peerTxt, "", "", "md"); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	was, now := readReport(t, oldJS), readReport(t, newJS)
	if was.Results[0].Geom != "0.8B" || now.Results[0].Geom != "0.8B" {
		t.Fatalf("geometries %q, %q: want 0.8B first in both", was.Results[0].Geom, now.Results[0].Geom)
	}
	ws, ns := was.Results[0].Student, now.Results[0].Student
	wt, nt := was.Results[0].Teacher, now.Results[0].Teacher
	// The throughput table: earlier → now, speed-up now/earlier.
	row := fmt.Sprintf("| 0.8B | %.0f → %.0f | %.2f× | %.0f → %.0f | %.2f× | %.2f → %.2f | %.2f → %.2f |",
		wt.TokS, nt.TokS, nt.TokS/wt.TokS, ws.TokS, ns.TokS, ns.TokS/ws.TokS, wt.PeakGiB, nt.PeakGiB, ws.PeakGiB, ns.PeakGiB)
	for _, want := range []string{
		"### Against the earlier run", row,
		"Earlier run: " + was.Date + " on " + was.Device + ", `" + was.Command + "` (" + was.GoVersion + ")",
		fmt.Sprintf("### 0.8B student step (%.1f ms of GPU time; %.1f before)", ns.ProfileMS, ws.ProfileMS),
		fmt.Sprintf("### 0.8B teacher pass, resident (%.1f ms of GPU time; %.1f before)", nt.ProfileMS, wt.ProfileMS),
		"| kernel | calls | total ms | before ms | speed-up | share | TFLOP/s | % of peak | GB/s | % of peak |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report with --before lacks %q:\n%s", want, out)
		}
	}
	// A kernel's speed-up, before/after, from the two profiles: the first teacher kernel whose
	// time changed by at least 5 % (SwiGLU in these runs), so that the ratio is not 1.00.
	msOf := func(p *bench.Phase, name string) float64 {
		for _, k := range p.Profile {
			if k.Name == name {
				return k.TotalMS
			}
		}
		t.Fatalf("no %s in the profile", name)
		return 0
	}
	checked := false
	for _, k := range nt.Profile[:10] {
		b := msOf(wt, k.Name)
		if math.Abs(b/k.TotalMS-1) < 0.05 {
			continue
		}
		want := fmt.Sprintf("| `%s` | %d | %.2f | %.2f | %.2f× | %.1f %% |", k.Name, k.Calls, k.TotalMS, b, b/k.TotalMS, k.Share)
		if !strings.Contains(out, want) {
			t.Errorf("report lacks the row %q", want)
		}
		checked = true
		break
	}
	if !checked {
		t.Error("no teacher kernel changed by 5 % between the two runs")
	}
	// MultiTensorAdam.* replaced Adam and Adam.rms: they are in the "… 52 more" row, which
	// therefore has no before figure, and the earlier kernels are named after the table.
	var restMS, restShare float64
	for _, k := range ns.Profile[15:] {
		restMS, restShare = restMS+k.TotalMS, restShare+k.Share
	}
	if want := fmt.Sprintf("| … %d more | | %.2f | — | — | %.1f %% |", len(ns.Profile)-15, restMS, restShare); !strings.Contains(out, want) {
		t.Errorf("report lacks the student table's more row %q", want)
	}
	if !strings.Contains(out, fmt.Sprintf("Only in the earlier run: `Adam.rms` %.2f ms, `Adam` %.2f ms.", msOf(ws, "Adam.rms"), msOf(ws, "Adam"))) {
		t.Errorf("report does not name the earlier run's Adam kernels:\n%s", out)
	}

	// The fixture: the earlier run's BLRForward.y took 420 ms (now 350: 1.20×), its student
	// step 4000 tok/s (now 5000: 1.25×); GatedDeltaRuleBackward is new (earlier it was
	// GatedDeltaRuleBackwardOld).
	dir := t.TempDir()
	js, old := filepath.Join(dir, "nvg.json"), filepath.Join(dir, "old.json")
	oldFixture := strings.NewReplacer(`"total_ms": 350, "share_pct": 50, "tflops": 6.7`, `"total_ms": 420, "share_pct": 50, "tflops": 6.7`,
		`"GatedDeltaRuleBackward"`, `"GatedDeltaRuleBackwardOld"`, `"tok_s": 5000`, `"tok_s": 4000`,
		`"date": "2026-11-30T18:00:00Z"`, `"date": "2026-11-01T09:00:00Z"`, `"go_version": "go1.26.8"`, `"go_version": "go1.26.8", "build": "abc1234"`).Replace(benchFixture)
	if oldFixture == benchFixture {
		t.Fatal("the fixture did not change")
	}
	for p, s := range map[string]string{js: benchFixture, old: oldFixture} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	md.Reset()
	if err := bench.RenderReport(&md, js, old, "", "", "", "md"); err != nil {
		t.Fatal(err)
	}
	out = md.String()
	for _, want := range []string{
		"Earlier run: 2026-11-01T09:00:00Z on NVIDIA H200, `nvg bench --model 0.8B,27B --json nvg.json` (abc1234)",
		"| 0.8B | 20000 → 20000 | 1.00× | 4000 → 5000 | 1.25× | 3.00 → 3.00 | 10.00 → 10.00 |",
		"| 27B | — → — | — | — → — | — | — → — | — → — |",
		"### 0.8B student step (700.0 ms of GPU time; 700.0 before)",
		"| `BLRForward.y` | 184 | 350.00 | 420.00 | 1.20× | 50.0 % | 6.70 | 10.0 | 480 | 10.0 |",
		"| `GatedDeltaRuleBackward` | 18 | 350.00 | — | — | 50.0 % | - | - | - | - |",
		"Only in the earlier run: `GatedDeltaRuleBackwardOld` 350.00 ms.",
		"| `Linear` | 100 | 100.00 | 100.00 | 1.00× | 66.7 % | 33.50 | 50.0 | 1200 | 25.0 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("fixture report with --before lacks %q:\n%s", want, out)
		}
	}
	// The text format adds the same comparison after the peer ratios.
	var txt bytes.Buffer
	if err := bench.RenderReport(&txt, js, old, "", "", "", "text"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "against the earlier run (2026-11-01T09:00:00Z, abc1234,") ||
		!strings.Contains(strings.Join(strings.Fields(txt.String()), " "), "0.8B 20000 20000 1.00× 4000 5000 1.25× 3.00 3.00 10.00 10.00") {
		t.Errorf("text with --before:\n%s", txt.String())
	}

	// Without --before the report is as before: the kernel tables have no before columns, and
	// an earlier run without a geometry in common only adds its section (the fixture renamed).
	md.Reset()
	if err := bench.RenderReport(&md, js, "", "", "", "", "md"); err != nil {
		t.Fatal(err)
	}
	plain := md.String()
	if strings.Contains(plain, "before ms") || strings.Contains(plain, " before)") || strings.Contains(plain, "earlier run") ||
		!strings.Contains(plain, "### 0.8B student step (700.0 ms of GPU time)\n\n| kernel | calls | total ms | share | TFLOP/s | % of peak | GB/s | % of peak |\n") {
		t.Errorf("report without --before:\n%s", plain)
	}
	other := filepath.Join(dir, "other.json")
	os.WriteFile(other, []byte(strings.NewReplacer(`"geom": "0.8B"`, `"geom": "2B"`, `"geom": "27B"`, `"geom": "9B"`).Replace(oldFixture)), 0o644)
	md.Reset()
	if err := bench.RenderReport(&md, js, other, "", "", "", "md"); err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(md.String(), "### Against the earlier run"), strings.Index(md.String(), "## Models")
	if i < 0 || j < i || !strings.Contains(md.String()[i:j], "No geometry of this run is in the earlier one with the same settings.") || md.String()[:i]+md.String()[j:] != plain {
		t.Errorf("report against a run without common geometries, less its section, differs from the plain report:\n%s", md.String())
	}
	// An earlier run of the same geometries with another nb × t and teacher mode measured other
	// work: it is named as not compared, and the kernel tables get no before columns.
	resized := filepath.Join(dir, "resized.json")
	os.WriteFile(resized, []byte(strings.NewReplacer(`"nb": 8, "t": 512`, `"nb": 4, "t": 256`, `"teacher_mode": "resident"`, `"teacher_mode": "streamed"`).Replace(oldFixture)), 0o644)
	md.Reset()
	if err := bench.RenderReport(&md, js, resized, "", "", "", "md"); err != nil {
		t.Fatal(err)
	}
	i, j = strings.Index(md.String(), "### Against the earlier run"), strings.Index(md.String(), "## Models")
	if i < 0 || j < i || md.String()[:i]+md.String()[j:] != plain ||
		!strings.Contains(md.String()[i:j], "Not compared, measured with other settings: 0.8B (nb × t 8 × 512 now, 4 × 256 before; teacher resident now, streamed before), 27B (nb × t 8 × 512 now, 4 × 256 before).") {
		t.Errorf("report against a resized run:\n%s", md.String()[max(i, 0):max(j, 0)])
	}

	missing := filepath.Join(dir, "missing.json")
	if err := bench.RenderReport(&md, js, old+","+missing, "", "", "", "md"); err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "--before") {
		t.Errorf("missing before file: %v, want an error naming --before and %s", err, missing)
	}
}

// abFixture is an nvg bench --tensor-cores on,off run of 0.8B: tensor cores on (teacher
// 40000, student 9000 tok/s, BLRForward.y at 200 TFLOP/s) and off (the benchFixture's 20000
// and 5000).
const abFixture = `{"device": "NVIDIA H200", "driver": "NVIDIA 580.1", "backend": "vulkan", "date": "2026-12-06T10:00:00Z",
 "command": "nvg bench --model 0.8B --tensor-cores on,off", "go_version": "go1.26.8", "peak_tflops": 67, "peak_gbps": 4800,
 "peak_tensor_tflops": 1000, "tensor_cores": "on (16×16×16 f16→f32, subgroup 32)",
 "results": [
  {"geom": "0.8B", "nb": 8, "t": 512, "k": 32, "tokens": 4096, "teacher_mode": "resident", "tensor_cores": "on (16×16×16 f16→f32, subgroup 32)",
   "teacher": {"median_s": 0.1024, "tok_s": 40000, "peak_GiB": 3.5},
   "student": {"median_s": 0.455, "tok_s": 9000, "peak_GiB": 9.5, "profile_ms": 300,
     "profile": [{"name": "BLRForward.y", "calls": 184, "total_ms": 150, "share_pct": 50, "tflops": 200, "gbps": 480}]}},
  {"geom": "0.8B", "nb": 8, "t": 512, "k": 32, "tokens": 4096, "teacher_mode": "resident", "tensor_cores": "off: forced off (nvg bench --tensor-cores off)",
   "teacher": {"median_s": 0.2048, "tok_s": 20000, "peak_GiB": 3},
   "student": {"median_s": 0.8192, "tok_s": 5000, "peak_GiB": 10, "profile_ms": 700,
     "profile": [{"name": "BLRForward.y", "calls": 184, "total_ms": 350, "share_pct": 50, "tflops": 6.7, "gbps": 480}]}}
 ]}`

// TestBenchReportTensorCores renders an A/B of the tensor-core paths beside the peer; the
// ratios by hand: 40000/30900 = 1.29, 20000/30900 = 0.65, 40000/20000 = 2.00; 9000/6080 =
// 1.48, 5000/6080 = 0.82, 9000/5000 = 1.80; student peak 9.5/39.1 = 0.24; BLRForward.y at
// 200 TFLOP/s is 298.5 % of the f32 peak and 20.0 % of the tensor peak. The text format
// labels the rows 0.8B/on and 0.8B/off; against an earlier run on the f32 path alone (the
// benchFixture) both rows compare with it, the path named where it differs.
func TestBenchReportTensorCores(t *testing.T) {
	dir := t.TempDir()
	js, peer, old := filepath.Join(dir, "ab.json"), filepath.Join(dir, "peer.txt"), filepath.Join(dir, "old.json")
	for p, s := range map[string]string{js: abFixture, peer: peerFixture, old: benchFixture} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var md bytes.Buffer
	if err := bench.RenderReport(&md, js, old, peer, "", "", "md"); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"- Tensor cores: on (16×16×16 f16→f32, subgroup 32)",
		"on tensor cores 1000 TFLOP/s (f16 operands, f32 accumulation)",
		"| geometry | teacher | teacher pass tok/s, on | off | peer | on/peer | off/peer | on/off | student step tok/s, on | off | peer | on/peer | off/peer | on/off |",
		"| 0.8B | resident | 40000 | 20000 | 30900 | 1.29 | 0.65 | 2.00 | 9000 | 5000 | 6080 | 1.48 | 0.82 | 1.80 |",
		"| 0.8B | 3.50 | 3.00 | 5.00 | 9.50 | 10.00 | 39.10 | 0.24 |",
		"### 0.8B student step, tensor cores on (16×16×16 f16→f32, subgroup 32) (300.0 ms of GPU time; 700.0 before)",
		"### 0.8B student step, tensor cores off: forced off (nvg bench --tensor-cores off) (700.0 ms of GPU time; 700.0 before)",
		"| kernel | calls | total ms | before ms | speed-up | share | TFLOP/s | % of f32 peak | % of tensor peak | GB/s | % of peak |",
		"| `BLRForward.y` | 184 | 150.00 | 350.00 | 2.33× | 50.0 % | 200.00 | 298.5 | 20.0 | 480 | 10.0 |",
		"| 0.8B/on (before: off) | 20000 → 40000 | 2.00× | 5000 → 9000 | 1.80× |",
		"| 0.8B/off | 20000 → 20000 | 1.00× | 5000 → 5000 | 1.00× |",
		"| 0.8B/on | 8 × 512 |", "| 0.8B/off | 8 × 512 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("A/B markdown lacks %q:\n%s", want, out)
		}
	}
	var txt bytes.Buffer
	if err := bench.RenderReport(&txt, js, "", peer, "", "", "text"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(txt.String(), "\n")
	if f := strings.Fields(lines[1]); len(f) != 13 || f[0] != "0.8B/on" || f[3] != "1.29" || f[6] != "1.48" {
		t.Errorf("text line %q", f)
	}
	if f := strings.Fields(lines[2]); len(f) != 13 || f[0] != "0.8B/off" || f[3] != "0.65" || f[6] != "0.82" {
		t.Errorf("text line %q", f)
	}
	// Merging: a second file's 0.8B on tensor cores replaces the first's, its f32 result stays.
	js2 := filepath.Join(dir, "ab2.json")
	os.WriteFile(js2, []byte(strings.Replace(abFixture, `"tok_s": 9000`, `"tok_s": 9900`, 1)), 0o644)
	md.Reset()
	if err := bench.RenderReport(&md, js+","+js2, "", peer, "", "", "md"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| 9900 | 5000 | 6080 | 1.63 | 0.82 | 1.98 |") {
		t.Errorf("merged A/B:\n%s", md.String())
	}
}

// peerFixtureOnce renders the report of js against the one-run peer output and returns it.
func peerFixtureOnce(t *testing.T, js, peer string) string {
	t.Helper()
	var md bytes.Buffer
	if err := bench.RenderReport(&md, js, "", peer, "", "", "md"); err != nil {
		t.Fatal(err)
	}
	return md.String()
}
