package data

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nvg-project/nvg/nvgkit/tokenizer"
	"golang.org/x/text/unicode/norm"
)

const (
	tinyTokenizer = "../../cmf/tinyteacher/model/tokenizer.json"
	tinyCases     = "../../testdata/fixtures/tokenizer-cases-tiny-go.json"
)

func loadTiny(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(tinyTokenizer)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type tokCase struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

func loadCases(t testing.TB) []tokCase {
	t.Helper()
	b, err := os.ReadFile(tinyCases)
	if err != nil {
		t.Fatal(err)
	}
	var cs []tokCase
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestStdlibSplitCounts checks the model card's split (312 held-out, 6140 training files
// for Go 1.26.8). It lists files only. On another Go version the counts differ, so only
// the listing's invariants are checked there (and the test says so).
func TestStdlibSplitCounts(t *testing.T) {
	root, err := GoRoot()
	if err != nil {
		t.Skipf("no Go tree: %v", err)
	}
	c, err := ListGoTree(filepath.Join(root, "src"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range c.HeldOut {
		if !IsHeldOut(rel) {
			t.Fatalf("%s listed as held out", rel)
		}
	}
	for _, rel := range c.Train {
		if IsHeldOut(rel) || strings.Contains("/"+rel, "/testdata/") || !strings.HasSuffix(rel, ".go") {
			t.Fatalf("%s listed for training", rel)
		}
	}
	if runtime.Version() != "go1.26.8" {
		t.Skipf("Go %s: the model card's counts are for go1.26.8 (got %d train, %d held out)",
			runtime.Version(), len(c.Train), len(c.HeldOut))
	}
	if len(c.HeldOut) != 312 || len(c.Train) != 6140 {
		t.Fatalf("got %d held-out and %d training files, MODEL_CARD.md says 312 and 6140", len(c.HeldOut), len(c.Train))
	}
}

// writeCases writes the fixture texts to files in a temporary directory.
func writeCases(t *testing.T, cs []tokCase) []string {
	dir := t.TempDir()
	var paths []string
	for i, c := range cs {
		p := filepath.Join(dir, "f"+string(rune('a'+i%26))+strings.Repeat("x", i/26)+".go")
		if err := os.WriteFile(p, []byte(c.Text), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// TestTokenizeFiles checks the stream of explicit files against the HF fixture ids, each
// document followed by <|endoftext|> (id 0 in the tiny tokenizer, per its model card).
func TestTokenizeFiles(t *testing.T) {
	tok := loadTiny(t)
	cs := loadCases(t)
	paths := writeCases(t, cs)
	c, err := FilesCorpus(paths[:30], paths[30:])
	if err != nil {
		t.Fatal(err)
	}
	for _, split := range []Split{Train, HeldOut} {
		var want []int
		lo, hi := 0, 30
		if split == HeldOut {
			lo, hi = 30, len(cs)
		}
		for _, tc := range cs[lo:hi] {
			want = append(want, tc.IDs...)
			want = append(want, 0)
		}
		got, err := c.Tokens(tok, split, "")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s stream differs from the fixture ids", split)
		}
	}
}

func TestFilesCorpusMissing(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "a.go")
	os.WriteFile(ok, []byte("package a\n"), 0o644)
	missing := filepath.Join(dir, "missing.go")
	if _, err := FilesCorpus([]string{ok, missing}, nil); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := FilesCorpus([]string{ok}, []string{dir}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory as file: %v", err)
	}
	if _, err := FilesCorpus(nil, nil); err == nil {
		t.Fatal("empty corpus accepted")
	}
	if c, err := FilesCorpus(nil, []string{ok}); err != nil || len(c.HeldOut) != 1 {
		t.Fatalf("held-out-only corpus: %v", err)
	}
	if _, err := ListGoTree(filepath.Join(dir, "nope")); err == nil {
		t.Fatal("missing tree accepted")
	}
}

// TestListGoTree checks the walk rules on a small tree: testdata skipped, > 256 KiB
// skipped, non-.go skipped, and the held-out rule on relative slash paths.
func TestListGoTree(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, size int) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(strings.Repeat("x", size)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/b.go", 10)
	write("a/testdata/c.go", 10)
	write("testdata/d.go", 10)
	write("a/big.go", MaxFileSize+1)
	write("a/edge.go", MaxFileSize)
	write("a/e.txt", 10)
	var heldName string
	for i := 0; heldName == ""; i++ { // find a name the crc rule holds out
		n := "h/f" + strings.Repeat("y", i) + ".go"
		if IsHeldOut(n) {
			heldName = n
		}
	}
	write(heldName, 5)
	c, err := ListGoTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Train, []string{"a/b.go", "a/edge.go"}) || !slices.Equal(c.HeldOut, []string{heldName}) {
		t.Fatalf("train %v, held out %v", c.Train, c.HeldOut)
	}
	paths, _ := c.Paths(Train)
	if paths[0] != filepath.Join(dir, "a", "b.go") {
		t.Fatalf("Paths: %v", paths)
	}
	if _, err := c.Paths(Split(7)); err == nil {
		t.Fatal("unknown split accepted")
	}
}

func TestTokenCache(t *testing.T) {
	tok := loadTiny(t)
	cs := loadCases(t)
	paths := writeCases(t, cs[:5])
	c, err := FilesCorpus(paths, nil)
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache")
	first, err := c.Tokens(tok, Train, cache)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(cache, "*.tok"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	again, err := ReadStream(files[0], tok.VocabSize())
	if err != nil || !slices.Equal(again, first) {
		t.Fatalf("cache content differs: %v", err)
	}
	// A hit must return the cached stream; corrupt the cache to a valid but different
	// stream and check it is what comes back.
	if err := WriteStream(files[0], []int{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	hit, err := c.Tokens(tok, Train, cache)
	if err != nil || !slices.Equal(hit, []int{1, 2, 3}) {
		t.Fatalf("cache not used: %v %v", hit, err)
	}
	// A changed file changes the key.
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(paths[0], []byte("package x\n"), 0o644)
	miss, err := c.Tokens(tok, Train, cache)
	if err != nil || slices.Equal(miss, []int{1, 2, 3}) {
		t.Fatalf("changed file hit the cache: %v", err)
	}
	// Truncated files are rejected by ReadStream and rebuilt by Tokens.
	os.WriteFile(files[0], []byte("NVGTOK01\x05\x00\x00\x00\x00\x00\x00\x00\x01"), 0o644)
	if _, err := ReadStream(files[0], 0); err == nil {
		t.Fatal("truncated stream accepted")
	}
	if _, err := ReadStream(filepath.Join(cache, "none.tok"), 0); err == nil {
		t.Fatal("missing stream accepted")
	}
	if err := WriteStream(filepath.Join(cache, "neg.tok"), []int{-1}); err == nil {
		t.Fatal("negative id written")
	}
}

func TestWindows(t *testing.T) {
	stream := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	w, err := Windows(stream, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}
	if len(w) != 3 {
		t.Fatalf("got %v", w)
	}
	for i := range want {
		if !slices.Equal(w[i], want[i]) || cap(w[i]) != 3 {
			t.Fatalf("window %d = %v (cap %d), want %v", i, w[i], cap(w[i]), want[i])
		}
	}
	if _, err := Windows(stream, 0); err == nil {
		t.Fatal("t = 0 accepted")
	}
	if w, _ := Windows(stream, 11); len(w) != 0 {
		t.Fatalf("t > len: %v", w)
	}
}

func TestSampler(t *testing.T) {
	stream := make([]int, 1000)
	for i := range stream {
		stream[i] = i
	}
	a, _ := NewSampler(stream, 16, 42)
	b, _ := NewSampler(stream, 16, 42)
	c, _ := NewSampler(stream, 16, 43)
	wa, err := a.Sample(64)
	if err != nil {
		t.Fatal(err)
	}
	wb, _ := b.Sample(64)
	wc, _ := c.Sample(64)
	same := true
	seen := map[int]bool{}
	for i := range wa {
		if len(wa[i]) != 17 {
			t.Fatalf("window %d has %d tokens, want 17", i, len(wa[i]))
		}
		for j := 1; j < 17; j++ { // consecutive tokens of the stream
			if wa[i][j] != wa[i][0]+j {
				t.Fatalf("window %d is not a slice of the stream: %v", i, wa[i])
			}
		}
		if wa[i][0] < 0 || wa[i][0] > 1000-17 {
			t.Fatalf("start %d out of range", wa[i][0])
		}
		if !slices.Equal(wa[i], wb[i]) {
			t.Fatalf("same seed, window %d differs", i)
		}
		same = same && slices.Equal(wa[i], wc[i])
		seen[wa[i][0]] = true
	}
	if same {
		t.Fatal("seeds 42 and 43 gave the same windows")
	}
	if len(seen) < 50 {
		t.Fatalf("only %d distinct starts in 64 draws of 984", len(seen))
	}
	// Every start, including the last, is reachable (uniform over [0, len-t-1]).
	s, _ := NewSampler([]int{10, 11, 12}, 2, 1)
	hits := map[int]int{}
	for range 200 {
		w, _ := s.Sample(1)
		hits[w[0][0]]++
	}
	if len(hits) != 1 || hits[10] != 200 {
		t.Fatalf("one possible start: %v", hits)
	}
	s, _ = NewSampler([]int{10, 11, 12, 13}, 2, 1)
	hits = map[int]int{}
	for range 200 {
		w, _ := s.Sample(1)
		hits[w[0][0]]++
	}
	if hits[10] < 60 || hits[11] < 60 {
		t.Fatalf("two possible starts, drawn %v", hits)
	}
	// SampleFlat draws what Sample draws, laid out as inputs and shifted targets.
	in, tg, err := a.SampleFlat(3)
	if err != nil || len(in) != 48 || len(tg) != 48 {
		t.Fatalf("SampleFlat: %d, %d, %v", len(in), len(tg), err)
	}
	ws, _ := b.Sample(3) // b is at the same point of the same sequence as a was
	for i, w := range ws {
		for j := 0; j < 16; j++ {
			if int(in[i*16+j]) != w[j] || int(tg[i*16+j]) != w[j+1] {
				t.Fatalf("SampleFlat window %d token %d: %d→%d, Sample gives %v", i, j, in[i*16+j], tg[i*16+j], w)
			}
		}
	}
	if _, err := NewSampler(stream[:16], 16, 1); err == nil {
		t.Fatal("stream of t tokens accepted")
	}
	if _, err := NewSampler(stream, 0, 1); err == nil {
		t.Fatal("t = 0 accepted")
	}
	if _, err := a.Sample(0); err == nil {
		t.Fatal("nb = 0 accepted")
	}
}

// fixtureWindows reads the `ids` tensor ([2,64] i64: two windows of held-out Go source, as
// the HF reference tokenized them) from the reference fixtures' safetensors file.
func fixtureWindows(t *testing.T) [][]int {
	b, err := os.ReadFile("../../testdata/fixtures/fixtures-tiny-go.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	var e struct {
		Dtype   string   `json:"dtype"`
		Shape   []int    `json:"shape"`
		Offsets [2]int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(hdr["ids"], &e); err != nil || e.Dtype != "I64" || len(e.Shape) != 2 {
		t.Fatalf("ids tensor: %+v %v", e, err)
	}
	data := b[8+int64(n)+e.Offsets[0] : 8+int64(n)+e.Offsets[1]]
	out := make([][]int, e.Shape[0])
	for i := range out {
		for j := 0; j < e.Shape[1]; j++ {
			out[i] = append(out[i], int(int64(binary.LittleEndian.Uint64(data[8*(i*e.Shape[1]+j):]))))
		}
	}
	return out
}

// TestStdlibHeldOutStream tokenizes the default held-out split (312 files, ~0.5 s) and
// checks that both 64-token windows of held-out source in the HF reference fixtures occur
// in it, and that every document ends with <|endoftext|> (id 0).
func TestStdlibHeldOutStream(t *testing.T) {
	if runtime.Version() != "go1.26.8" {
		t.Skipf("the fixtures come from go1.26.8's source; this is %s", runtime.Version())
	}
	c, err := StdlibCorpus()
	if err != nil {
		t.Skipf("no Go tree: %v", err)
	}
	tok := loadTiny(t)
	stream, err := c.Tokens(tok, HeldOut, "")
	if err != nil {
		t.Fatal(err)
	}
	eots := 0
	for _, id := range stream {
		if id == 0 {
			eots++
		}
	}
	if eots != 312 || stream[len(stream)-1] != 0 {
		t.Fatalf("%d <|endoftext|> in the held-out stream, want 312, one after each file", eots)
	}
	for i, w := range fixtureWindows(t) {
		found := false
		for k := 0; k+len(w) <= len(stream) && !found; k++ {
			found = stream[k] == w[0] && slices.Equal(stream[k:k+len(w)], w)
		}
		if !found {
			t.Errorf("fixture window %d is not in the held-out stream", i)
		}
	}
}

// TestStdlibTokenize tokenizes the whole default corpus (both splits, 66 MB) and reports
// the time (about 10 s on 2 cores); -short skips it.
func TestStdlibTokenize(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: not tokenizing the whole standard library")
	}
	tok := loadTiny(t)
	c, err := StdlibCorpus()
	if err != nil {
		t.Skipf("no Go tree: %v", err)
	}
	for _, split := range []Split{HeldOut, Train} {
		paths, _ := c.Paths(split)
		var bytes int64
		for _, p := range paths {
			st, _ := os.Stat(p)
			bytes += st.Size()
		}
		start := time.Now()
		stream, err := TokenizeFiles(tok, paths)
		if err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		eots := 0
		for _, id := range stream {
			if id == 0 {
				eots++
			}
		}
		if eots != len(paths) {
			t.Fatalf("%s: %d <|endoftext|> for %d files", split, eots, len(paths))
		}
		// The first document decodes back to its (NFC) source.
		end := slices.Index(stream, 0)
		text, err := tok.Decode(stream[:end])
		src, _ := os.ReadFile(paths[0])
		if err != nil || text != norm.NFC.String(string(src)) {
			t.Fatalf("%s: first document does not decode to its source", split)
		}
		t.Logf("%s: %d files, %.1f MB, %d tokens (%.2f bytes/token) in %v (%.1f MB/s, GOMAXPROCS %d)",
			split, len(paths), float64(bytes)/1e6, len(stream), float64(bytes)/float64(len(stream)),
			el.Round(time.Millisecond), float64(bytes)/1e6/el.Seconds(), runtime.GOMAXPROCS(0))
	}
}
