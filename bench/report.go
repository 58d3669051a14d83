package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// peerResult is one `RESULT {json}` line of ../shared/bench/torch_baseline.py.
type peerResult struct {
	Geom           string  `json:"geom"`
	Tokens         int     `json:"tokens"`
	TeacherTokS    float64 `json:"teacher_tok_s"`
	StudentTokS    float64 `json:"student_tok_s"`
	TeacherPeakGiB float64 `json:"teacher_peak_GiB"`
	StudentPeakGiB float64 `json:"student_peak_GiB"`
	Torch          string  `json:"torch"`
}

// peerRun is the peer's output: its results by geometry (each the median of that
// geometry's runs, peerMedian), every run's result (runs), its FAILED lines, and why it was
// not run (the file's text when it has neither).
type peerRun struct {
	results map[string]peerResult
	runs    map[string][]peerResult
	failed  map[string]string
	order   []string
	note    string
}

// peerMedian is the result reported for a geometry the peer ran several times (RESULT lines
// of the same geom, in one file or several): each figure the median of the runs that have it
// (> 0; the mean of the middle two for an even count), Tokens and Torch the last run's. The
// peer's throughput moves between runs on one machine (the 0.8B teacher pass 33,314 to
// 45,000 tok/s on one H100 type, 2026-12-06), so one run is a poor reference.
func peerMedian(runs []peerResult) peerResult {
	med := func(get func(peerResult) float64) float64 {
		var v []float64
		for _, r := range runs {
			if x := get(r); x > 0 {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return 0
		}
		sort.Float64s(v)
		n := len(v)
		if n%2 == 1 {
			return v[n/2]
		}
		return (v[n/2-1] + v[n/2]) / 2
	}
	m := runs[len(runs)-1]
	m.TeacherTokS = med(func(r peerResult) float64 { return r.TeacherTokS })
	m.StudentTokS = med(func(r peerResult) float64 { return r.StudentTokS })
	m.TeacherPeakGiB = med(func(r peerResult) float64 { return r.TeacherPeakGiB })
	m.StudentPeakGiB = med(func(r peerResult) float64 { return r.StudentPeakGiB })
	return m
}

// summarise sets p.results from p.runs: each geometry's peerMedian.
func (p *peerRun) summarise() {
	for g, runs := range p.runs {
		p.results[g] = peerMedian(runs)
	}
}

// parsePeer reads the peer's stdout: `RESULT {json}` and `FAILED name reason…` lines; any
// other line is ignored. A file with neither is a peer that did not run: its first line is
// kept as the reason. Errors: an unreadable file or a RESULT line that is not valid JSON.
func parsePeer(r io.Reader) (*peerRun, error) {
	p := &peerRun{results: map[string]peerResult{}, runs: map[string][]peerResult{}, failed: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	first := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first == "" && line != "" {
			first = line
		}
		switch {
		case strings.HasPrefix(line, "RESULT "):
			var res peerResult
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "RESULT ")), &res); err != nil {
				return nil, fmt.Errorf("peer RESULT line %q: %w", line, err)
			}
			if res.Geom == "" {
				return nil, fmt.Errorf("peer RESULT line without geom: %q", line)
			}
			if _, ok := p.runs[res.Geom]; !ok {
				p.order = append(p.order, res.Geom)
			}
			p.runs[res.Geom] = append(p.runs[res.Geom], res)
		case strings.HasPrefix(line, "FAILED "):
			f := strings.Fields(line)
			if len(f) >= 2 {
				p.failed[f[1]] = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(line, "FAILED"), " "+f[1]))
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	p.summarise()
	if len(p.results) == 0 && len(p.failed) == 0 {
		p.note = first
		if p.note == "" {
			p.note = "no output"
		}
	}
	return p, nil
}

func readJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(r.Results) == 0 {
		return nil, fmt.Errorf("%s: no results", path)
	}
	return &r, nil
}

// ratio formats a/b with two decimals, "—" when either is missing.
func ratio(a, b float64) string {
	if !(a > 0) || !(b > 0) {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func num(v float64, format string) string {
	if !(v > 0) {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

// readJSONs reads comma-separated nvg bench JSON files and merges them: the header of
// the first, the results of all in order (a later result for the same geometry, teacher
// dtype and tensor-core path replaces an earlier one), the commands joined with "; ".
func readJSONs(paths string) (*Report, error) {
	var rep *Report
	for _, p := range strings.Split(paths, ",") {
		r, err := readJSON(p)
		if err != nil {
			return nil, err
		}
		if rep == nil {
			rep = r
			continue
		}
		rep.Command += "; " + r.Command
		if r.Build != rep.Build {
			rep.Build += "; " + r.Build
		}
	next:
		for _, x := range r.Results {
			for i := range rep.Results {
				if rep.Results[i].key() == x.key() && pathOf(rep.Results[i]) == pathOf(x) {
					rep.Results[i] = x
					continue next
				}
			}
			rep.Results = append(rep.Results, x)
		}
	}
	return rep, nil
}

// readPeers reads comma-separated peer outputs and merges them (a peer that ran in one file
// and not in another counts as run).
func readPeers(paths string) (*peerRun, error) {
	all := &peerRun{results: map[string]peerResult{}, runs: map[string][]peerResult{}, failed: map[string]string{}}
	var notes []string
	for _, p := range strings.Split(paths, ",") {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		pr, err := parsePeer(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if pr.note != "" {
			notes = append(notes, pr.note)
		}
		for _, g := range pr.order {
			if _, ok := all.runs[g]; !ok {
				all.order = append(all.order, g)
			}
			all.runs[g] = append(all.runs[g], pr.runs[g]...)
			delete(all.failed, g)
		}
		for g, why := range pr.failed {
			if _, ok := all.runs[g]; !ok {
				all.failed[g] = why
			}
		}
	}
	if len(all.runs) == 0 && len(all.failed) == 0 {
		all.note = strings.Join(notes, "; ")
	}
	all.summarise()
	return all, nil
}

// peerRunsNote says, for the geometries the peer ran more than once, that the tables give
// the median and what each run measured ("" when every geometry ran once).
func peerRunsNote(peer *peerRun) string {
	var parts []string
	for _, g := range peer.order {
		runs := peer.runs[g]
		if len(runs) < 2 {
			continue
		}
		var tt, st []string
		for _, r := range runs {
			tt = append(tt, num(r.TeacherTokS, "%.0f"))
			st = append(st, num(r.StudentTokS, "%.0f"))
		}
		parts = append(parts, fmt.Sprintf("%s: %d runs, teacher pass %s tok/s, student step %s", g, len(runs),
			strings.Join(tt, " / "), strings.Join(st, " / ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; the tables give the median of the peer's runs (" + strings.Join(parts, "; ") + ")"
}

// RenderReport writes docs/BENCHMARKS.md (format md) or the ratio table (text) from nvg
// bench JSON files, an earlier run's (optional: beforePath, compared against), the peer's
// outputs (optional) and a CPU-adapter nvg bench JSON (optional); reportPath, beforePath and
// peerPath may list several files, comma-separated (runs of different geometries, merged).
func RenderReport(w io.Writer, reportPath, beforePath, peerPath, cpuPath, notesPath, format string) error {
	var rep, before *Report
	var err error
	if reportPath != "" {
		if rep, err = readJSONs(reportPath); err != nil {
			return err
		}
		if rep.CPU {
			return fmt.Errorf("--report %s: measured on a CPU adapter (%s), not a GPU: render it with --cpu", reportPath, rep.Device)
		}
	} else if format != "md" {
		return fmt.Errorf("the %s format needs an nvg bench JSON", format)
	}
	if beforePath != "" {
		if rep == nil {
			return fmt.Errorf("--before needs --report")
		}
		if before, err = readJSONs(beforePath); err != nil {
			return fmt.Errorf("--before: %w", err)
		}
	}
	peer := &peerRun{results: map[string]peerResult{}, failed: map[string]string{}, note: "no peer output given"}
	if peerPath != "" {
		if peer, err = readPeers(peerPath); err != nil {
			return err
		}
	}
	var cpu *Report
	if cpuPath != "" {
		if cpu, err = readJSON(cpuPath); err != nil {
			return err
		}
	}
	if format == "text" {
		return renderRatios(w, rep, before, peer)
	}
	var notes []byte
	if notesPath != "" {
		if notes, err = os.ReadFile(notesPath); err != nil {
			return fmt.Errorf("--notes: %w", err)
		}
	}
	return renderMarkdown(w, rep, before, peer, cpu, notes)
}

// dtype is the result's teacher dtype, "f16" for reports written before 8-bit teachers.
func (r Result) dtype() string {
	if r.TeacherDType == "" {
		return "f16"
	}
	return r.TeacherDType
}

// key names a result within a report: its geometry, and its teacher dtype when not f16.
func (r Result) key() string {
	if r.dtype() == "f16" {
		return r.Geom
	}
	return r.Geom + " " + r.dtype()
}

// teacherOf is the teacher column of a result: its mode, and its dtype when not f16.
func teacherOf(r Result) string {
	if r.dtype() == "f16" {
		return r.TeacherMode
	}
	return r.TeacherMode + ", " + r.dtype()
}

func phaseOf(r Result) (t, s Phase) {
	if r.Teacher != nil {
		t = *r.Teacher
	}
	if r.Student != nil {
		s = *r.Student
	}
	return
}

// renderRatios writes the nvg/peer ratios per geometry as plain text, then, with before (an
// earlier run; nil for none), this run's throughput and student peak against it.
func renderRatios(w io.Writer, rep, before *Report, peer *peerRun) error {
	if peer.note != "" {
		fmt.Fprintf(w, "%s: nvg figures only\n", notRun(peer.note))
	}
	fmt.Fprintf(w, "%-6s %12s %12s %7s   %12s %12s %7s   %9s %9s %7s   %9s %9s %7s\n", "geom",
		"teacher nvg", "peer", "ratio", "student nvg", "peer", "ratio", "tpeak nvg", "peer", "ratio", "speak nvg", "peer", "ratio")
	ab := hasAB(rep)
	for _, r := range rep.Results {
		t, s := phaseOf(r)
		p := peer.results[r.Geom]
		fmt.Fprintf(w, "%-6s %12s %12s %7s   %12s %12s %7s   %9s %9s %7s   %9s %9s %7s\n", label(r, ab, "/"),
			num(t.TokS, "%.0f"), num(p.TeacherTokS, "%.0f"), ratio(t.TokS, p.TeacherTokS),
			num(s.TokS, "%.0f"), num(p.StudentTokS, "%.0f"), ratio(s.TokS, p.StudentTokS),
			num(t.PeakGiB, "%.2f"), num(p.TeacherPeakGiB, "%.2f"), ratio(t.PeakGiB, p.TeacherPeakGiB),
			num(s.PeakGiB, "%.2f"), num(p.StudentPeakGiB, "%.2f"), ratio(s.PeakGiB, p.StudentPeakGiB))
		if r.Error != "" {
			fmt.Fprintf(w, "       nvg failed: %s\n", firstLine(r.Error))
		}
		if f, ok := peer.failed[r.Geom]; ok {
			fmt.Fprintf(w, "       peer failed: %s\n", f)
		}
	}
	fmt.Fprintln(w, "ratios are nvg/peer: above 1 nvg is faster (tokens/s) or uses more memory (peak GiB)")
	if ab {
		fmt.Fprintln(w, "GEOM/on: the GEMMs on tensor cores (cooperative matrices, f16 operands); GEOM/off: the WGSL f32 kernels")
	}
	if before == nil {
		return nil
	}
	fmt.Fprintf(w, "\nagainst the earlier run (%s, %s, %s):\n", before.Date, buildOf(before), before.Command)
	const row = "%-6s %12s %12s %7s   %12s %12s %7s   %9s %9s   %9s %9s\n"
	fmt.Fprintf(w, row, "geom", "teacher was", "now", "speedup", "student was", "now", "speedup", "tpeak was", "now", "speak was", "now")
	pairs, skipped := commonResults(rep, before)
	for _, pair := range pairs {
		fmt.Fprintf(w, row, beforeCells(pair)...)
	}
	for _, sk := range skipped {
		fmt.Fprintf(w, "not compared, measured with other settings: %s\n", sk)
	}
	fmt.Fprintln(w, "speed-ups are now/earlier: above 1 this run is faster")
	return nil
}

// beforeCells are the comparison's cells of one geometry (pair: this run's result, the
// earlier run's), for the text and markdown tables alike: the geometry, then teacher tok/s
// before, now and the speed-up, the same for the student step, then teacher and student peak
// GiB before and now.
func beforeCells(pair [2]Result) []any {
	t, s := phaseOf(pair[0])
	bt, bs := phaseOf(pair[1])
	return []any{pathsCell(pair[0], pair[1]),
		num(bt.TokS, "%.0f"), num(t.TokS, "%.0f"), speedup(t.TokS, bt.TokS),
		num(bs.TokS, "%.0f"), num(s.TokS, "%.0f"), speedup(s.TokS, bs.TokS),
		num(bt.PeakGiB, "%.2f"), num(t.PeakGiB, "%.2f"),
		num(bs.PeakGiB, "%.2f"), num(s.PeakGiB, "%.2f")}
}

// speedup formats a/b with two decimals and "×", "—" when either is missing.
func speedup(a, b float64) string {
	if s := ratio(a, b); s != "—" {
		return s + "×"
	}
	return "—"
}

// buildOf names the build a report measured: its Build, else (a JSON from before builds
// were recorded) its Go version.
func buildOf(rep *Report) string {
	if rep.Build != "" {
		return rep.Build
	}
	return rep.GoVersion
}

// commonResults pairs each result of rep with the earlier run's result of the same
// geometry, in rep's order, when both measured the same work (incomparable says how they
// differ otherwise: those go to skipped, one line each); geometries missing from either are
// left out.
func commonResults(rep, before *Report) (pairs [][2]Result, skipped []string) {
	for _, r := range rep.Results {
		b, ok := earlier(before, r)
		if !ok {
			continue
		}
		if why := incomparable(r, b); why != "" {
			skipped = append(skipped, fmt.Sprintf("%s (%s)", pathsCell(r, b), why))
		} else {
			pairs = append(pairs, [2]Result{r, b})
		}
	}
	return pairs, skipped
}

// earlier is the earlier run's result that now is compared with: the same geometry on the
// same tensor-core path, else (an earlier run on one path, or from before paths were
// recorded) the geometry's first result.
func earlier(before *Report, now Result) (Result, bool) {
	var first *Result
	for i, b := range before.Results {
		if b.key() != now.key() {
			continue
		}
		if pathOf(b) == pathOf(now) {
			return b, true
		}
		if first == nil {
			first = &before.Results[i]
		}
	}
	if first == nil {
		return Result{}, false
	}
	return *first, true
}

// pathOf is the tensor-core path a result was measured on: "on", "off", or "" where the JSON
// does not say (from before tensor cores: the f32 path).
func pathOf(r Result) string {
	switch {
	case strings.HasPrefix(r.TensorCores, "on"):
		return "on"
	case strings.HasPrefix(r.TensorCores, "off"):
		return "off"
	}
	return ""
}

// hasAB reports whether rep measured some geometry on both paths (nvg bench --tensor-cores
// on,off).
func hasAB(rep *Report) bool {
	seen := map[string]string{}
	for _, r := range rep.Results {
		p := pathOf(r)
		if q, ok := seen[r.Geom]; ok && q != p && p != "" && q != "" {
			return true
		}
		seen[r.Geom] = p
	}
	return false
}

// label names a result in a table: its geometry, and with path its tensor-core path after sep
// ("0.8B/on"; " tensor cores on" for headings).
func label(r Result, path bool, sep string) string {
	if !path || pathOf(r) == "" {
		return r.key()
	}
	return r.key() + sep + pathOf(r)
}

// pathsCell names the geometry of a comparison with the tensor-core paths: "0.8B" when
// neither run recorded one, "0.8B/on" when both ran on it, "0.8B/on (before: off)" when
// they differ.
func pathsCell(now, was Result) string {
	p, q := pathOf(now), pathOf(was)
	switch {
	case p == "" && q == "":
		return now.key()
	case orF32(p) == orF32(q):
		return now.key() + "/" + orF32(p)
	}
	return fmt.Sprintf("%s/%s (before: %s)", now.key(), orF32(p), orF32(q))
}

// orF32 names an unrecorded tensor-core path: a JSON from before tensor cores measured the
// WGSL f32 kernels ("off").
func orF32(path string) string {
	if path == "" {
		return "off"
	}
	return path
}

// incomparable says how results now and was of one geometry measured different work (nb × t,
// top-k, teacher mode, kept activations or their budget, sign training, hidden-state loss,
// ranks), "" when
// they did not. The tensor-core path is how the work is done, not what it is: runs on either
// path compare (the row names both paths when they differ, beforeCells).
func incomparable(now, was Result) string {
	var d []string
	if now.NB != was.NB || now.T != was.T {
		d = append(d, fmt.Sprintf("nb × t %d × %d now, %d × %d before", now.NB, now.T, was.NB, was.T))
	}
	if now.K != was.K {
		d = append(d, fmt.Sprintf("k %d now, %d before", now.K, was.K))
	}
	if now.TeacherMode != was.TeacherMode {
		d = append(d, fmt.Sprintf("teacher %s now, %s before", now.TeacherMode, was.TeacherMode))
	}
	if now.KeepActivations != was.KeepActivations {
		d = append(d, fmt.Sprintf("kept activations %v now, %v before", now.KeepActivations, was.KeepActivations))
	}
	// What the step kept (Trainer.Activations) where both runs say it, else the budgets.
	switch {
	case now.Activations != "" && was.Activations != "":
		if now.Activations != was.Activations {
			d = append(d, fmt.Sprintf("%q now, %q before", now.Activations, was.Activations))
		}
	case now.ActivationBudget != was.ActivationBudget:
		d = append(d, fmt.Sprintf("activation budget %d MiB now, %d before", now.ActivationBudget>>20, was.ActivationBudget>>20))
	}
	if now.TrainSigns != was.TrainSigns {
		d = append(d, fmt.Sprintf("sign training %v now, %v before", now.TrainSigns, was.TrainSigns))
	}
	if now.HiddenLoss != was.HiddenLoss {
		d = append(d, fmt.Sprintf("hidden-state loss %q now, %q before", now.HiddenLoss, was.HiddenLoss))
	}
	if max(now.Ranks, 1) != max(was.Ranks, 1) {
		d = append(d, fmt.Sprintf("%d ranks now, %d before", max(now.Ranks, 1), max(was.Ranks, 1)))
	}
	return strings.Join(d, "; ")
}

// profiledPhase returns the earlier run's teacher pass (student false) or student step that
// compares with now (same geometry, incomparable empty) when it has a profile, nil otherwise
// (also for a nil before).
func profiledPhase(before *Report, now Result, student bool) *Phase {
	if before == nil {
		return nil
	}
	r, ok := earlier(before, now)
	if !ok || incomparable(now, r) != "" {
		return nil
	}
	p := r.Teacher
	if student {
		p = r.Student
	}
	if p != nil && len(p.Profile) > 0 {
		return p
	}
	return nil
}

// profileOf is p's profile, nil for a nil p.
func profileOf(p *Phase) []Kernel {
	if p == nil {
		return nil
	}
	return p.Profile
}

// beforeMS is the heading's mention of the earlier run's profiled time ("; 1229.0 before"),
// empty without an earlier profile.
func beforeMS(p *Phase) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("; %.1f before", p.ProfileMS)
}

// notRun phrases the reason the peer did not run as "peer not run: …".
func notRun(note string) string {
	if strings.HasPrefix(note, "peer not run") {
		return note
	}
	return "peer not run: " + note
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// kernelTable writes the top n rows of a profile as a markdown table; without ceilings
// (peakTF = 0: a CPU adapter) it gives GFLOP/s and GB/s only. With before (the same phase's
// profile in an earlier run; empty for none) two columns follow total ms: the kernel's total
// ms in the earlier run and the speed-up before/after, "—" for a kernel the earlier run lacks
// (and for the "… N more" row unless the earlier run has every kernel it covers), and a line
// after the table names the earlier run's kernels this run lacks. peakTensor > 0 (a run on
// tensor cores) adds each kernel's share of the tensor-core ceiling after the f32 one's.
func kernelTable(w io.Writer, rows, before []Kernel, n int, peakTF, peakTensor, peakGB float64) {
	rateHead, rates := " TFLOP/s | % of peak | GB/s | % of peak |", 4 // rates: the columns after share
	switch {
	case peakTF == 0:
		rateHead, rates = " GFLOP/s | GB/s |", 2
	case peakTensor > 0:
		rateHead, rates = " TFLOP/s | % of f32 peak | % of tensor peak | GB/s | % of peak |", 5
	}
	cmpHead, cmps := "", 0 // the earlier run's columns
	var was map[string]float64
	if len(before) > 0 {
		cmpHead, cmps = " before ms | speed-up |", 2
		was = map[string]float64{}
		for _, k := range before {
			was[k.Name] += k.TotalMS
		}
	}
	// compare gives the earlier run's cells for then ms there and now ms in this run (empty
	// without an earlier profile); ok false: the earlier run lacks a kernel they cover.
	compare := func(then, now float64, ok bool) string {
		if was == nil {
			return ""
		}
		if !ok {
			return " — | — |"
		}
		return fmt.Sprintf(" %.2f | %s |", then, speedup(then, now))
	}
	fmt.Fprintln(w, "| kernel | calls | total ms |"+cmpHead+" share |"+rateHead)
	fmt.Fprintln(w, "|---|---:|---:|"+strings.Repeat("---:|", cmps+1+rates))
	for i, k := range rows {
		if i == n {
			var rest, restMS, restWas float64
			all := true
			for _, x := range rows[n:] {
				rest += x.Share
				restMS += x.TotalMS
				v, ok := was[x.Name]
				restWas, all = restWas+v, all && ok
			}
			total := ""
			if was != nil {
				total = fmt.Sprintf(" %.2f", restMS)
			}
			fmt.Fprintf(w, "| … %d more | |%s |%s %.1f %% |%s\n", len(rows)-n, total, compare(restWas, restMS, all), rest, strings.Repeat(" |", rates))
			break
		}
		var cells []string
		if peakTF == 0 {
			cells = []string{num(1000*k.TFLOPs, "%.2f"), num(k.GBps, "%.2f")}
		} else {
			cells = []string{"-", "-", "-", "-"}
			if k.TFLOPs > 0 {
				cells[0], cells[1] = fmt.Sprintf("%.2f", k.TFLOPs), fmt.Sprintf("%.1f", 100*k.TFLOPs/peakTF)
			}
			if k.GBps > 0 {
				cells[2], cells[3] = fmt.Sprintf("%.0f", k.GBps), fmt.Sprintf("%.1f", 100*k.GBps/peakGB)
			}
			if peakTensor > 0 {
				tp := "-"
				if k.TFLOPs > 0 {
					tp = fmt.Sprintf("%.1f", 100*k.TFLOPs/peakTensor)
				}
				cells = append(cells[:2], append([]string{tp}, cells[2:]...)...)
			}
		}
		v, ok := was[k.Name]
		fmt.Fprintf(w, "| `%s` | %d | %.2f |%s %.1f %% | %s |\n", k.Name, k.Calls, k.TotalMS, compare(v, k.TotalMS, ok), k.Share, strings.Join(cells, " | "))
	}
	// The earlier run's kernels this run lacks (renamed or gone), so that the totals add up.
	var gone []string
	seen := map[string]bool{}
	for _, k := range rows {
		seen[k.Name] = true
	}
	for _, k := range before {
		if !seen[k.Name] {
			seen[k.Name] = true
			gone = append(gone, fmt.Sprintf("`%s` %.2f ms", k.Name, was[k.Name]))
		}
	}
	if len(gone) > 0 {
		fmt.Fprintf(w, "\nOnly in the earlier run: %s.\n", strings.Join(gone, ", "))
	}
	fmt.Fprintln(w)
}

// resultsTable writes the throughput/memory table of a report (with the peer's columns when
// peer is not nil); a report with an A/B of the tensor-core paths gets abTables instead.
func resultsTable(w io.Writer, rep *Report, peer *peerRun) {
	if hasAB(rep) {
		abTables(w, rep, peer)
		return
	}
	if peer != nil {
		fmt.Fprintln(w, "| geometry | teacher | teacher pass tok/s | peer | nvg/peer | student step tok/s | peer | nvg/peer | teacher peak GiB | peer | nvg/peer | student peak GiB | peer | nvg/peer |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	} else {
		fmt.Fprintln(w, "| geometry | teacher | teacher pass tok/s | student step tok/s | teacher peak GiB | student peak GiB |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|")
	}
	for _, r := range rep.Results {
		t, s := phaseOf(r)
		if peer == nil {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.Geom, teacherOf(r), num(t.TokS, "%.0f"), num(s.TokS, "%.0f"),
				num(t.PeakGiB, "%.2f"), num(s.PeakGiB, "%.2f"))
			continue
		}
		p := peer.results[r.Geom]
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Geom, teacherOf(r),
			num(t.TokS, "%.0f"), num(p.TeacherTokS, "%.0f"), ratio(t.TokS, p.TeacherTokS),
			num(s.TokS, "%.0f"), num(p.StudentTokS, "%.0f"), ratio(s.TokS, p.StudentTokS),
			num(t.PeakGiB, "%.2f"), num(p.TeacherPeakGiB, "%.2f"), ratio(t.PeakGiB, p.TeacherPeakGiB),
			num(s.PeakGiB, "%.2f"), num(p.StudentPeakGiB, "%.2f"), ratio(s.PeakGiB, p.StudentPeakGiB))
	}
	fmt.Fprintln(w)
}

// abTables writes the throughput, then the peak memory, of a report that measured geometries
// on both tensor-core paths (nvg bench --tensor-cores on,off): per geometry the path on
// tensor cores, the f32 path and the peer side by side (peer nil: no peer columns), with the
// ratios on/peer, off/peer and on/off.
func abTables(w io.Writer, rep *Report, peer *peerRun) {
	if peer == nil {
		peer = &peerRun{results: map[string]peerResult{}}
	}
	var geoms []string
	byPath := map[string]map[string]Result{}
	for _, r := range rep.Results {
		if byPath[r.Geom] == nil {
			geoms = append(geoms, r.Geom)
			byPath[r.Geom] = map[string]Result{}
		}
		byPath[r.Geom][orF32(pathOf(r))] = r
	}
	fmt.Fprintln(w, "Tensor cores on: the GEMMs on cooperative matrices (f16 operands, f32 accumulation); off: the WGSL f32 kernels.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| geometry | teacher | teacher pass tok/s, on | off | peer | on/peer | off/peer | on/off | student step tok/s, on | off | peer | on/peer | off/peer | on/off |")
	fmt.Fprintln(w, "|---|---|"+strings.Repeat("---:|", 12))
	for _, g := range geoms {
		on, off, p := byPath[g]["on"], byPath[g]["off"], peer.results[g]
		ton, son := phaseOf(on)
		toff, soff := phaseOf(off)
		mode := on.TeacherMode
		if mode == "" {
			mode = off.TeacherMode
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", g, mode,
			num(ton.TokS, "%.0f"), num(toff.TokS, "%.0f"), num(p.TeacherTokS, "%.0f"), ratio(ton.TokS, p.TeacherTokS), ratio(toff.TokS, p.TeacherTokS), ratio(ton.TokS, toff.TokS),
			num(son.TokS, "%.0f"), num(soff.TokS, "%.0f"), num(p.StudentTokS, "%.0f"), ratio(son.TokS, p.StudentTokS), ratio(soff.TokS, p.StudentTokS), ratio(son.TokS, soff.TokS))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| geometry | teacher peak GiB, on | off | peer | student peak GiB, on | off | peer | on/peer |")
	fmt.Fprintln(w, "|---|"+strings.Repeat("---:|", 7))
	for _, g := range geoms {
		ton, son := phaseOf(byPath[g]["on"])
		toff, soff := phaseOf(byPath[g]["off"])
		p := peer.results[g]
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", g,
			num(ton.PeakGiB, "%.2f"), num(toff.PeakGiB, "%.2f"), num(p.TeacherPeakGiB, "%.2f"),
			num(son.PeakGiB, "%.2f"), num(soff.PeakGiB, "%.2f"), num(p.StudentPeakGiB, "%.2f"), ratio(son.PeakGiB, p.StudentPeakGiB))
	}
	fmt.Fprintln(w)
}

// beforeTable writes this run's throughput and peak memory (teacher and student) against
// the earlier run's, for the geometries both measured alike, and names the earlier run.
func beforeTable(w io.Writer, rep, before *Report) {
	fmt.Fprintln(w, "### Against the earlier run")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Earlier run: %s on %s, `%s` (%s). Figures are earlier → now; speed-ups are now/earlier (above 1, this run is faster).\n\n",
		before.Date, before.Device, before.Command, buildOf(before))
	pairs, skipped := commonResults(rep, before)
	if len(skipped) > 0 {
		fmt.Fprintf(w, "Not compared, measured with other settings: %s.\n\n", strings.Join(skipped, ", "))
	}
	if len(pairs) == 0 {
		fmt.Fprintln(w, "No geometry of this run is in the earlier one with the same settings.")
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintln(w, "| geometry | teacher pass tok/s | speed-up | student step tok/s | speed-up | teacher peak GiB | student peak GiB |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, pair := range pairs {
		fmt.Fprintf(w, "| %s | %s → %s | %s | %s → %s | %s | %s → %s | %s → %s |\n", beforeCells(pair)...)
	}
	fmt.Fprintln(w)
}

// quantTable writes, when rep measured 8-bit teachers, their teacher pass against the f16
// teacher's of the same geometry and mode: tokens/s, peak GPU memory and the bytes a
// streamed pass uploads, each with its ratio to f16's.
func quantTable(w io.Writer, rep *Report) {
	f16 := map[string]Phase{}
	quant := false
	for _, r := range rep.Results {
		t, _ := phaseOf(r)
		if r.dtype() == "f16" {
			f16[r.Geom+" "+r.TeacherMode] = t
		} else {
			quant = true
		}
	}
	if !quant {
		return
	}
	fmt.Fprint(w, `### 8-bit teachers

The teacher pass with 8-bit projections (`+"`--teacher-dtype`"+`: fp8, e4m3 codes and an f32 scale per 128×128
block; q8, int8 codes and an f16 scale per row and 128 inputs; dequantized inside the GEMMs' tile loads)
against the f16 teacher (a bf16 checkpoint on the GPU) of the same geometry and mode, measured in the same
run(s). Upload: the bytes a streamed pass moves to the GPU.

With `+"`--teacher-gap`"+`, the last two columns say how far each 8-bit teacher's distributions are
from the f16 teacher's, on random weights and nb windows of random tokens (the 8-bit weights
the quantized f16 ones): the mean top-k KL (both renormalised over the f16 teacher's top-k)
and the top-1 agreement.

| geometry | teacher | teacher pass tok/s | × f16 | peak GiB | × f16 | upload GB/pass | × f16 | top-k KL (nats) | top-1 |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|
`)
	for _, r := range rep.Results {
		t, _ := phaseOf(r)
		b := f16[r.Geom+" "+r.TeacherMode]
		kl, top1 := "—", "—"
		if g := r.TeacherGap; g != nil {
			kl, top1 = fmt.Sprintf("%.3g", g.TopKKL), fmt.Sprintf("%.2f %%", 100*g.Top1)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Geom, teacherOf(r),
			num(t.TokS, "%.0f"), ratio(t.TokS, b.TokS), num(t.PeakGiB, "%.2f"), ratio(t.PeakGiB, b.PeakGiB),
			num(float64(t.UploadBytes)/1e9, "%.2f"), ratio(float64(t.UploadBytes), float64(b.UploadBytes)), kl, top1)
	}
	fmt.Fprintln(w)
}

// modelTable writes the model counts and the failure, if any, of each geometry.
func modelTable(w io.Writer, rep *Report) {
	fmt.Fprintln(w, "| geometry | nb × t | parameters | BLR weights | bits/weight | trained values | student weights GiB | loss | failure |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---|")
	ab := hasAB(rep)
	for _, r := range rep.Results {
		_, s := phaseOf(r)
		fail := ""
		if r.Error != "" {
			fail = strings.ReplaceAll(firstLine(r.Error), "|", "\\|")
		}
		loss := "—" // a teacher-only result (another teacher dtype of the geometry) took no step
		if s.TokS > 0 {
			loss = fmt.Sprintf("%.4f", r.Loss)
		}
		fmt.Fprintf(w, "| %s | %d × %d | %.3f B | %.1f M | %.3f | %.2f M | %s | %s | %s |\n", label(r, ab, "/"), r.NB, r.T,
			float64(r.Params)/1e9, float64(r.BLRWeights)/1e6, r.BitsPerWeight, float64(r.Trainables)/1e6,
			num(float64(s.WeightBytes)/(1<<30), "%.2f"), loss, fail)
	}
	fmt.Fprintln(w)
}

// renderMarkdown writes docs/BENCHMARKS.md; notes (hand-written markdown, e.g. the targets
// and what explains each miss) go after the throughput table when not empty; before (an
// earlier run, nil for none) adds a table against it after the throughput table and its
// figures to the per-kernel tables.
func renderMarkdown(w io.Writer, rep, before *Report, peer *peerRun, cpu *Report, notes []byte) error {
	fmt.Fprintln(w, "# nvg benchmarks")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Generated by `bench/run.sh` with `nvg bench --report` from the runs' JSON and the PyTorch peer's")
	fmt.Fprintln(w, "output (`../shared/bench/torch_baseline.py`, same geometries, same machine, same command). Synthetic")
	fmt.Fprintln(w, "random weights (speed does not depend on them). Teacher pass: forward + top-k over nb × t tokens;")
	fmt.Fprintln(w, "student step: forward, KL(teacher top-k ‖ student) over the full vocabulary, backward, gradient")
	fmt.Fprintln(w, "clipping, Adam; medians of the timed runs after warm-up, wall clock with a GPU sync.")
	fmt.Fprintln(w)
	if rep == nil {
		fmt.Fprintln(w, "## GPU figures: pending")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Not measured yet. On the GPU machine, from the project root, with a prebuilt binary")
		fmt.Fprintln(w, "(`go build -o nvg ./cmd/nvg` where Go is): `NVG_BIN=./nvg bench/run.sh` (all four geometries), or")
		fmt.Fprintln(w, "split under a per-command time limit: `OUT=bench/out/h200 NVG_BIN=./nvg bench/run.sh 0.8B,4B`, then")
		fmt.Fprintln(w, "`OUT=bench/out/h200 NVG_BIN=./nvg bench/run.sh 9B,27B`. The script rewrites this file.")
		fmt.Fprintln(w)
		return renderCPU(w, cpu)
	}
	fmt.Fprintf(w, "- Date: %s\n- GPU: %s (%s), driver: %s\n- nvg: `%s` (%s)\n", rep.Date, rep.Device, rep.Backend, rep.Driver, rep.Command, buildOf(rep))
	torch := ""
	for _, g := range peer.order {
		if v := peer.results[g].Torch; v != "" {
			torch = v
		}
	}
	switch {
	case peer.note != "":
		fmt.Fprintf(w, "- Peer: **not run** (%s); nvg's figures only.\n", strings.TrimPrefix(notRun(peer.note), "peer not run: "))
	default:
		fmt.Fprintf(w, "- Peer: torch_baseline.py, torch %s, PyTorch eager, bf16 autocast%s\n", torch, peerRunsNote(peer))
	}
	if rep.TensorCores != "" {
		fmt.Fprintf(w, "- Tensor cores: %s\n", rep.TensorCores)
	}
	for _, r := range rep.Results {
		if r.ActivationBudget > 0 || r.KeepActivations {
			fmt.Fprintf(w, "- Student step %s: %s (--activation-budget-mib %d, --keep-activations %v)\n", label(r, true, "/"), r.Activations, r.ActivationBudget>>20, r.KeepActivations)
		}
	}
	fmt.Fprintf(w, "- Roofline ceilings: %.0f TFLOP/s (f32, non-tensor), %.0f GB/s", rep.PeakTFLOPs, rep.PeakGBps)
	if rep.PeakTensorTFLOPs > 0 {
		fmt.Fprintf(w, "; on tensor cores %.0f TFLOP/s (f16 operands, f32 accumulation)", rep.PeakTensorTFLOPs)
	}
	fmt.Fprint(w, "\n\n")
	fmt.Fprintln(w, "## Throughput and peak GPU memory")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratios are nvg/peer: above 1, nvg is faster (tokens/s) or needs more memory (GiB = 2³⁰ bytes).")
	fmt.Fprintln(w)
	resultsTable(w, rep, peer)
	if len(peer.failed) > 0 {
		fmt.Fprintln(w, "Peer failures:")
		fmt.Fprintln(w)
		for g, f := range peer.failed {
			fmt.Fprintf(w, "- %s: `%s`\n", g, strings.ReplaceAll(f, "`", "'"))
		}
		fmt.Fprintln(w)
	}
	if before != nil {
		beforeTable(w, rep, before)
	}
	quantTable(w, rep)
	if len(notes) > 0 {
		w.Write(bytes.TrimSpace(notes))
		fmt.Fprintln(w)
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "## Models")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Bits per weight: the BLR projections' .cmf payload (sign bits, f16 scales, header) over their weights; ranks")
	fmt.Fprintln(w, "by the peer's rank_for (2 paths, multiples of 128, rounded down).")
	fmt.Fprintln(w)
	modelTable(w, rep)
	fmt.Fprintln(w, "## Where the student step's GPU time goes")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "One profiled step per geometry (one compute pass per dispatch with timestamps between them, so the")
	fmt.Fprintln(w, "total is a little above the unprofiled step). Rates from the costs the kernels declare.")
	fmt.Fprintln(w)
	profileTables(w, rep, before, true, 15)
	fmt.Fprintln(w, "## Where the teacher pass's GPU time goes")
	fmt.Fprintln(w)
	profileTables(w, rep, before, false, 10)
	return renderCPU(w, cpu)
}

// renderCPU writes the CPU-adapter section.
// profileTables writes a kernel table (its first rows rows) per geometry of the student step
// (student) or the teacher pass, against the earlier run's when there is one.
func profileTables(w io.Writer, rep, before *Report, student bool, rows int) {
	for _, r := range rep.Results {
		ph, what := r.Teacher, "teacher pass, "+teacherOf(r)
		if student {
			ph, what = r.Student, "student step"
		}
		if ph == nil || len(ph.Profile) == 0 {
			continue
		}
		tensor := 0.0 // the tensor ceiling's column, for a run on tensor cores
		if pathOf(r) != "" {
			what += ", tensor cores " + r.TensorCores
			if pathOf(r) == "on" {
				tensor = rep.PeakTensorTFLOPs
			}
		}
		bp := profiledPhase(before, r, student)
		fmt.Fprintf(w, "### %s %s (%.1f ms of GPU time%s)\n\n", r.Geom, what, ph.ProfileMS, beforeMS(bp))
		kernelTable(w, ph.Profile, profileOf(bp), rows, rep.PeakTFLOPs, tensor, rep.PeakGBps)
	}
}

func renderCPU(w io.Writer, cpu *Report) error {
	fmt.Fprintln(w, "## CPU adapter (Mesa lavapipe), tiny geometry")
	fmt.Fprintln(w)
	if cpu == nil {
		fmt.Fprintln(w, "Not included in this run.")
		return nil
	}
	fmt.Fprintf(w, "For tests and CI, not speed (times depend on the host's cores and load): %s (%s), %s, `%s`.\n\n",
		cpu.Device, cpu.Driver, cpu.Date, cpu.Command)
	resultsTable(w, cpu, nil)
	modelTable(w, cpu)
	for _, r := range cpu.Results {
		if r.Student != nil && len(r.Student.Profile) > 0 {
			fmt.Fprintf(w, "### %s student step on the CPU (%.1f ms)\n\n", label(r, hasAB(cpu), ", tensor cores "), r.Student.ProfileMS)
			kernelTable(w, r.Student.Profile, nil, 10, 0, 0, 0)
		}
	}
	return nil
}
