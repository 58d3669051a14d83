package cmf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/nvg-project/nvg/testkit/jsontest"
)

// stEntry is one tensor for writeSafetensorsFile: a name and a tensor to copy.
type stEntry struct {
	name string
	t    *Tensor
}

// safetensorsBytes builds a plain safetensors file (as the reference writer does: sorted
// names, contiguous data, header padded with spaces to 8 bytes), independently of
// WriteCMF.
func safetensorsBytes(t testing.TB, meta map[string]string, es []stEntry) []byte {
	t.Helper()
	hdr := map[string]any{}
	if meta != nil {
		hdr["__metadata__"] = meta
	}
	var data bytes.Buffer
	// json.Marshal sorts map keys; lay data out in the same order.
	names := make([]string, 0, len(es))
	byName := map[string]*Tensor{}
	for _, e := range es {
		names = append(names, e.name)
		byName[e.name] = e.t
	}
	sortStrings(names)
	for _, n := range names {
		tt := byName[n]
		b, err := tt.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		hdr[n] = map[string]any{"dtype": string(tt.DType), "shape": tt.Shape, "data_offsets": []int{data.Len(), data.Len() + len(b)}}
		data.Write(b)
	}
	h, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := make([]byte, 8, 8+len(h)+data.Len())
	binary.LittleEndian.PutUint64(out, uint64(len(h)))
	out = append(out, h...)
	return append(out, data.Bytes()...)
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// vlCheckpoint returns the files of a synthetic vision-language checkpoint built from the
// tiny teacher: nested text_config with an untied head, model.language_model.* names,
// mtp.* and model.visual.* tensors to drop, two shards and an HF index.
func vlCheckpoint(t testing.TB, src *Model) map[string][]byte {
	t.Helper()
	text := tinyConfigJSON(t)
	delete(text, "tie_word_embeddings")
	cfg := map[string]any{"model_type": "qwen3_5", "text_config": text, "tie_word_embeddings": false,
		"vision_config": map[string]any{"depth": 2}}
	vis, _ := NewFloatTensor("v", BF16, []int{4, 3}, make([]float64, 12))
	mtp, _ := NewFloatTensor("m", F32, []int{5}, []float64{1, 2, 3, 4, 5})
	var sh1, sh2 []stEntry
	wm := map[string]string{}
	for i, n := range src.Names() {
		hfName := "model.language_model." + strings.TrimPrefix(n, "model.")
		if i%2 == 0 {
			sh1 = append(sh1, stEntry{hfName, src.Tensors[n]})
			wm[hfName] = "model-00001-of-00002.safetensors"
		} else {
			sh2 = append(sh2, stEntry{hfName, src.Tensors[n]})
			wm[hfName] = "model-00002-of-00002.safetensors"
		}
	}
	sh1 = append(sh1, stEntry{"model.visual.blocks.0.attn.qkv.weight", vis}, stEntry{"lm_head.weight", src.Tensors["model.embed_tokens.weight"]})
	sh2 = append(sh2, stEntry{"mtp.layers.0.mlp.up_proj.weight", mtp})
	wm["model.visual.blocks.0.attn.qkv.weight"] = "model-00001-of-00002.safetensors"
	wm["lm_head.weight"] = "model-00001-of-00002.safetensors"
	wm["mtp.layers.0.mlp.up_proj.weight"] = "model-00002-of-00002.safetensors"
	return map[string][]byte{
		"config.json":                      jsontest.Marshal(t, cfg),
		"model.safetensors.index.json":     jsontest.Marshal(t, map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": wm}),
		"model-00001-of-00002.safetensors": safetensorsBytes(t, map[string]string{"format": "pt"}, sh1),
		"model-00002-of-00002.safetensors": safetensorsBytes(t, map[string]string{"format": "pt"}, sh2),
	}
}

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func checkVL(t *testing.T, src, got *Model) {
	t.Helper()
	if got.Config.TieWordEmbeddings || got.Config.HiddenSize != 256 {
		t.Fatalf("config %+v", got.Config)
	}
	if len(got.Tensors) != len(src.Tensors)+1 {
		t.Fatalf("%d tensors, want %d + lm_head: %v", len(got.Tensors), len(src.Tensors), got.Names())
	}
	for _, n := range append(src.Names(), "lm_head.weight") {
		sn := n
		if n == "lm_head.weight" {
			sn = "model.embed_tokens.weight"
		}
		a, _ := src.Tensors[sn].Bytes()
		gt, ok := got.Tensors[n]
		if !ok {
			t.Fatalf("%s missing", n)
		}
		b, err := gt.Bytes()
		if err != nil || !bytes.Equal(a, b) || gt.DType != src.Tensors[sn].DType {
			t.Fatalf("%s differs (%v)", n, err)
		}
	}
}

func TestOpenVLShardedCheckpoint(t *testing.T) {
	src := openTiny(t)
	files := vlCheckpoint(t, src)
	dir := t.TempDir()
	writeFiles(t, dir, files)
	got, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkVL(t, src, got)
	got.Close()
	// Through the index file, and through OpenFS.
	got, err = Open(filepath.Join(dir, HFIndexName))
	if err != nil {
		t.Fatal(err)
	}
	checkVL(t, src, got)
	got.Close()
	mfs := fstest.MapFS{}
	for n, b := range files {
		mfs["ckpt/"+n] = &fstest.MapFile{Data: b}
	}
	got, err = OpenFS(mfs, "ckpt")
	if err != nil {
		t.Fatal(err)
	}
	checkVL(t, src, got)
	// Imported VL checkpoint → CMF → same tensors.
	roundTrip(t, got, filepath.Join(t.TempDir(), "vl.cmf"))
}

// countingFS counts the bytes read through ReadAt.
type countingFS struct {
	fstest.MapFS
	n *atomic.Int64
}

type countingFile struct {
	fs.File
	n *atomic.Int64
}

func (c countingFS) Open(name string) (fs.File, error) {
	f, err := c.MapFS.Open(name)
	if err != nil {
		return nil, err
	}
	return countingFile{f, c.n}, nil
}

func (c countingFile) ReadAt(p []byte, off int64) (int, error) {
	k, err := c.File.(io.ReaderAt).ReadAt(p, off)
	c.n.Add(int64(k))
	return k, err
}

func TestOpenIsLazy(t *testing.T) {
	src := openTiny(t)
	files := vlCheckpoint(t, src)
	cfs := countingFS{fstest.MapFS{}, &atomic.Int64{}}
	var total int
	for n, b := range files {
		cfs.MapFS[n] = &fstest.MapFile{Data: b}
		total += len(b)
	}
	m, err := OpenFS(cfs, ".")
	if err != nil {
		t.Fatal(err)
	}
	if r := cfs.n.Load(); r > 64<<10 {
		t.Fatalf("Open read %d of %d bytes; only headers and config should be read", r, total)
	}
	before := cfs.n.Load()
	if _, err := m.Tensors["model.norm.weight"].Bytes(); err != nil {
		t.Fatal(err)
	}
	if d := cfs.n.Load() - before; d != 512 {
		t.Fatalf("reading model.norm.weight read %d bytes, want 512", d)
	}
}

func TestOpenHFErrors(t *testing.T) {
	src := openTiny(t)
	good := vlCheckpoint(t, src)
	withIndex := func(wm map[string]string) map[string][]byte {
		f := map[string][]byte{}
		for k, v := range good {
			f[k] = v
		}
		f[HFIndexName] = jsontest.Marshal(t, map[string]any{"weight_map": wm})
		return f
	}
	var goodWM map[string]string
	{
		var ix ShardIndex
		if err := json.Unmarshal(good[HFIndexName], &ix); err != nil {
			t.Fatal(err)
		}
		goodWM = ix.WeightMap
	}
	edit := func(k, v string) map[string]string {
		wm := map[string]string{}
		for a, b := range goodWM {
			wm[a] = b
		}
		if v == "" {
			delete(wm, k)
		} else {
			wm[k] = v
		}
		return wm
	}
	const n0 = "model.language_model.norm.weight"
	const moved = "model.language_model.layers.0.input_layernorm.weight"
	other := "model-00001-of-00002.safetensors"
	if goodWM[moved] == other {
		other = "model-00002-of-00002.safetensors"
	}
	cases := []struct {
		name  string
		files map[string][]byte
		want  []string
	}{
		{"no config", map[string][]byte{"model.safetensors": good["model-00001-of-00002.safetensors"]}, []string{"no config.json"}},
		{"no weights", map[string][]byte{"config.json": good["config.json"]}, []string{"neither model.safetensors nor model.safetensors.index.json"}},
		{"escape ..", withIndex(edit(n0, "../model-00002-of-00002.safetensors")), []string{HFIndexName, n0, "../model-00002"}},
		{"absolute", withIndex(edit(n0, "/etc/passwd")), []string{n0, "/etc/passwd"}},
		{"separator", withIndex(edit(n0, "sub/x.safetensors")), []string{n0, "sub/x.safetensors"}},
		{"backslash", withIndex(edit(n0, `..\x.safetensors`)), []string{n0, `..\\x.safetensors`}},
		{"dotdot", withIndex(edit(n0, "..")), []string{n0, `".."`}},
		{"missing shard", withIndex(edit(n0, "model-00003-of-00003.safetensors")), []string{"model-00003-of-00003.safetensors"}},
		{"moved tensor", withIndex(edit(moved, other)), []string{moved, "places it in " + other}},
		{"unlisted tensor", withIndex(edit(n0, "")), []string{n0, "not in the weight_map"}},
		{"empty weight_map", withIndex(map[string]string{}), []string{"weight_map is missing or empty"}},
	}
	for _, tc := range cases {
		dir := t.TempDir()
		writeFiles(t, dir, tc.files)
		_, err := Open(dir)
		if err == nil {
			t.Errorf("%s: opened", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
	// Two names that map to the same text name.
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{
		"config.json": good["config.json"],
		"model.safetensors": safetensorsBytes(t, nil, []stEntry{
			{"model.norm.weight", src.Tensors["model.norm.weight"]},
			{"model.language_model.norm.weight", src.Tensors["model.norm.weight"]}}),
	})
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "both map to model.norm.weight") {
		t.Errorf("duplicate mapping: %v", err)
	}
	// A tensor outside the architecture is named by Validate.
	es := []stEntry{{"model.extra.weight", src.Tensors["model.norm.weight"]}}
	for _, n := range src.Names() {
		es = append(es, stEntry{n, src.Tensors[n]})
	}
	dir = t.TempDir()
	cfgTied, _ := os.ReadFile(tinyDir + "/config.json")
	writeFiles(t, dir, map[string][]byte{"config.json": cfgTied, "model.safetensors": safetensorsBytes(t, nil, es)})
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "model.extra.weight is not part of the architecture") {
		t.Errorf("extra tensor: %v", err)
	}
	// A tied checkpoint that still stores lm_head.weight opens without it.
	es = append(es[1:], stEntry{"lm_head.weight", src.Tensors["model.embed_tokens.weight"]})
	writeFiles(t, dir, map[string][]byte{"model.safetensors": safetensorsBytes(t, nil, es)})
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Tensors["lm_head.weight"]; ok {
		t.Error("tied head kept lm_head.weight")
	}
	m.Close()
	// Ambiguous directory.
	writeFiles(t, dir, map[string][]byte{CMFFileName: []byte("x")})
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "both an HF checkpoint") {
		t.Errorf("ambiguous dir: %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing path: %v", err)
	}
}

// TestOpenIndexFileWinsOverSingle: opening the index file uses the shards even when a
// model.safetensors sits beside it (which opening the directory prefers, as transformers).
func TestOpenIndexFileWinsOverSingle(t *testing.T) {
	src := openTiny(t)
	dir := t.TempDir()
	writeFiles(t, dir, vlCheckpoint(t, src))
	writeFiles(t, dir, map[string][]byte{HFWeightsName: []byte("not safetensors")})
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, HFWeightsName)) {
		t.Fatalf("dir with a broken model.safetensors: %v", err)
	}
	m, err := Open(filepath.Join(dir, HFIndexName))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	checkVL(t, src, m)
}

// tinyConfigJSON is the tiny teacher's config.json as a generic JSON object, to edit.
func tinyConfigJSON(t testing.TB) map[string]any {
	return jsontest.Object(t, tinyDir+"/config.json")
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
