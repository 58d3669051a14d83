package cmf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"github.com/nvg-project/nvg/arch"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const tinyDir = "tinyteacher/model"

func openTiny(t *testing.T) *Model {
	t.Helper()
	m, err := Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// roundTrip writes m as the CMF file path and opens it again (closed when the test ends); it
// fails the test unless the config and tensors read back equal m's.
func roundTrip(t *testing.T, m *Model, path string) *Model {
	t.Helper()
	if err := WriteCMF(path, m); err != nil {
		t.Fatal(err)
	}
	got, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { got.Close() })
	if !reflect.DeepEqual(got.Config, m.Config) {
		t.Fatalf("config\n%+v\n%+v", got.Config, m.Config)
	}
	sameTensors(t, m, got)
	return got
}

// sameTensors checks that b holds exactly a's tensors with identical dtype, shape and bytes.
func sameTensors(t *testing.T, a, b *Model) {
	t.Helper()
	if !reflect.DeepEqual(a.Names(), b.Names()) {
		t.Fatalf("names differ:\n%v\n%v", a.Names(), b.Names())
	}
	for _, n := range a.Names() {
		x, y := a.Tensors[n], b.Tensors[n]
		if x.DType != y.DType || !reflect.DeepEqual(x.Shape, y.Shape) {
			t.Fatalf("%s: %s %v vs %s %v", n, x.DType, x.Shape, y.DType, y.Shape)
		}
		bx, err := x.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		by, err := y.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bx, by) {
			t.Fatalf("%s: bytes differ", n)
		}
	}
}

// mixedModel is the tiny teacher with tensors replaced to cover every dtype: F32, F16, BF16,
// F64 and BLR (arbitrary payload bytes of odd length, so later tensors are not aligned).
func mixedModel(t *testing.T) *Model {
	t.Helper()
	src := openTiny(t)
	m := NewModel(src.Config)
	for _, n := range src.Names() {
		if err := m.Set(src.Tensors[n]); err != nil {
			t.Fatal(err)
		}
	}
	conv := func(name string, d DType) {
		v, err := src.Tensors[name].Float64()
		if err != nil {
			t.Fatal(err)
		}
		nt, err := NewFloatTensor(name, d, src.Tensors[name].Shape, v)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Set(nt); err != nil {
			t.Fatal(err)
		}
	}
	conv("model.layers.0.mlp.gate_proj.weight", F16)
	conv("model.layers.1.mlp.gate_proj.weight", F32)
	conv("model.norm.weight", F64)
	for i, name := range []string{"model.layers.2.mlp.up_proj.weight", "model.layers.3.self_attn.q_proj.weight"} {
		shape := src.Tensors[name].Shape
		payload := make([]byte, 1001+i*6)
		for j := range payload {
			payload[j] = byte(j*7 + i)
		}
		bt, err := NewTensor(name, BLR, shape, payload)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Set(bt); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func TestWriteCMFRoundTripTinyTeacher(t *testing.T) {
	src := openTiny(t)
	path := filepath.Join(t.TempDir(), "tiny.cmf")
	roundTrip(t, src, path)
	// The tiny teacher's weights are 17.9 MB of data; the CMF is that plus a header.
	st, _ := os.Stat(path)
	var data int64
	for _, tt := range src.Tensors {
		data += tt.NumBytes()
	}
	if st.Size() < data || st.Size() > data+64<<10 {
		t.Fatalf("file %d bytes for %d bytes of data", st.Size(), data)
	}
}

func TestWriteCMFAllDTypesAndPlainSafetensorsLayout(t *testing.T) {
	m := mixedModel(t)
	path := filepath.Join(t.TempDir(), "mixed.cmf")
	got := roundTrip(t, m, path)
	if d := got.Tensors["model.layers.2.mlp.up_proj.weight"]; d.DType != BLR || !reflect.DeepEqual(d.Shape, []int{768, 256}) || d.NumBytes() != 1001 {
		t.Fatalf("blr tensor read back as %s %v %d bytes", d.DType, d.Shape, d.NumBytes())
	}

	// Read the file as a plain safetensors file, independently of this package's reader.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(raw)
	if (8+hlen)%8 != 0 {
		t.Fatalf("data section starts at %d, not 8-byte aligned", 8+hlen)
	}
	if raw[8+hlen-1] != '}' && raw[8+hlen-1] != ' ' {
		t.Fatalf("header padding byte %q", raw[8+hlen-1])
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+hlen], &hdr); err != nil {
		t.Fatal(err)
	}
	var meta map[string]string
	if err := json.Unmarshal(hdr["__metadata__"], &meta); err != nil {
		t.Fatal(err)
	}
	if meta["cmf"] != "1" {
		t.Fatalf("cmf version %q", meta["cmf"])
	}
	var ac arch.Config
	if err := json.Unmarshal([]byte(meta["arch"]), &ac); err != nil || ac.HiddenSize != 256 || len(ac.LayerTypes) != 8 || !ac.TieWordEmbeddings || ac.RopeTheta != 1e7 || ac.PartialRotaryFactor != 0.25 {
		t.Fatalf("arch %s: %v", meta["arch"], err)
	}
	var ct map[string]struct {
		DType string `json:"dtype"`
		Shape []int  `json:"shape"`
	}
	if err := json.Unmarshal([]byte(meta["cmf.tensors"]), &ct); err != nil {
		t.Fatal(err)
	}
	if len(ct) != 2 || ct["model.layers.3.self_attn.q_proj.weight"].DType != "blr" || !reflect.DeepEqual(ct["model.layers.3.self_attn.q_proj.weight"].Shape, []int{512, 256}) {
		t.Fatalf("cmf.tensors %v", ct)
	}
	type entry struct {
		DType       string  `json:"dtype"`
		Shape       []int64 `json:"shape"`
		DataOffsets []int64 `json:"data_offsets"`
	}
	var names []string
	entries := map[string]entry{}
	for k, v := range hdr {
		if k == "__metadata__" {
			continue
		}
		var e entry
		if err := json.Unmarshal(v, &e); err != nil {
			t.Fatal(err)
		}
		entries[k] = e
		names = append(names, k)
	}
	sort.Strings(names)
	if !reflect.DeepEqual(names, m.Names()) {
		t.Fatal("entries differ from the model's tensors")
	}
	var off int64
	for _, n := range names { // sorted name order, contiguous
		e := entries[n]
		if e.DataOffsets[0] != off {
			t.Fatalf("%s starts at %d, want %d", n, e.DataOffsets[0], off)
		}
		want, _ := m.Tensors[n].Bytes()
		if !bytes.Equal(raw[8+int64(hlen)+e.DataOffsets[0]:8+int64(hlen)+e.DataOffsets[1]], want) {
			t.Fatalf("%s: bytes at its offsets differ", n)
		}
		off = e.DataOffsets[1]
	}
	if 8+int64(hlen)+off != int64(len(raw)) {
		t.Fatal("data section does not end at the end of the file")
	}
	e := entries["model.layers.2.mlp.up_proj.weight"]
	if e.DType != "U8" || !reflect.DeepEqual(e.Shape, []int64{1001}) {
		t.Fatalf("blr entry stored as %s %v, want U8 [1001]", e.DType, e.Shape)
	}
	if e := entries["model.norm.weight"]; e.DType != "F64" || entries["model.layers.0.mlp.gate_proj.weight"].DType != "F16" ||
		entries["model.layers.1.mlp.gate_proj.weight"].DType != "F32" || entries["model.embed_tokens.weight"].DType != "BF16" ||
		entries["model.layers.0.linear_attn.A_log"].DType != "F32" {
		t.Fatalf("plain dtypes not kept: %v", e)
	}
}

func TestWriteCMFShardedRoundTrip(t *testing.T) {
	m := mixedModel(t)
	dir := filepath.Join(t.TempDir(), "sharded")
	if err := WriteCMFSharded(dir, m, 1<<20); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var shards []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".cmf") {
			shards = append(shards, e.Name())
		}
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file %s left behind", e.Name())
		}
	}
	// The 4 MiB embedding gets a shard of its own; the remaining ~14 MB fill 1 MiB shards.
	if len(shards) < 10 || shards[0] != "model-00001-of-"+shards[0][15:20]+".cmf" {
		t.Fatalf("shards %v", shards)
	}
	for _, open := range []string{dir, filepath.Join(dir, CMFIndexName)} {
		got, err := Open(open)
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, m, got)
		if !reflect.DeepEqual(got.Config, m.Config) {
			t.Fatal("config differs")
		}
		got.Close()
	}
	// Each shard is a complete CMF file of its own.
	one, err := Open(filepath.Join(dir, shards[0]))
	if err == nil || !strings.Contains(err.Error(), "is missing") {
		t.Fatalf("a single shard should open as a CMF file lacking tensors, got %v", err)
	}
	_ = one
	var ix ShardIndex
	data, _ := os.ReadFile(filepath.Join(dir, CMFIndexName))
	if err := json.Unmarshal(data, &ix); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, tt := range m.Tensors {
		total += tt.NumBytes()
	}
	if ix.Metadata["total_size"] != float64(total) || ix.Metadata["cmf"] != "1" || len(ix.WeightMap) != len(m.Tensors) {
		t.Fatalf("index metadata %v, %d entries", ix.Metadata, len(ix.WeightMap))
	}
	// Rewriting with one big shard replaces the index and removes the stale shards.
	if err := WriteCMFSharded(dir, m, 1<<40); err != nil {
		t.Fatal(err)
	}
	ents, _ = os.ReadDir(dir)
	if len(ents) != 2 || ents[0].Name() != "model-00001-of-00001.cmf" || ents[1].Name() != CMFIndexName {
		t.Fatalf("after rewrite: %v", ents)
	}
	got, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, m, got)
	got.Close()
	if err := WriteCMFSharded(dir, m, 0); err == nil {
		t.Fatal("maxShardBytes 0 accepted")
	}
}

func TestWriteCMFAtomicOnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.cmf")
	if err := os.WriteFile(path, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A file-backed tensor whose file is closed fails half way through the write.
	src, err := Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	src.Close()
	err = WriteCMF(path, src)
	if err == nil || !strings.Contains(err.Error(), "tensor lm_head.weight") && !strings.Contains(err.Error(), "tensor model.") {
		t.Fatalf("write from a closed model: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "previous" {
		t.Fatalf("previous file changed to %d bytes", len(b))
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temporary file left: %v", ents)
	}
	// An invalid model is refused before anything is written.
	m := NewModel(src.Config)
	if err := WriteCMF(path, m); err == nil || !strings.Contains(err.Error(), "model.embed_tokens.weight is missing") {
		t.Fatalf("write of an empty model: %v", err)
	}
}

func TestOpenCMFInDirectoryAndFS(t *testing.T) {
	m := smallModel(t)
	dir := t.TempDir()
	if err := WriteCMF(filepath.Join(dir, CMFFileName), m); err != nil {
		t.Fatal(err)
	}
	got, err := Open(dir) // a directory holding model.cmf
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, m, got)
	got.Close()
	got, err = OpenFS(os.DirFS(dir), CMFFileName)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, m, got)
	got.Close()
	if _, err := OpenFS(os.DirFS(dir), "../x"); err == nil || !strings.Contains(err.Error(), `"../x" is not a valid fs path`) {
		t.Fatalf("OpenFS ../x: %v", err)
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no config.json") {
		t.Fatalf("empty dir: %v", err)
	}
	odd := t.TempDir()
	if err := os.Mkdir(filepath.Join(odd, "config.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(odd); err == nil || !strings.Contains(err.Error(), "config.json is a directory, not a file") {
		t.Fatalf("config.json a directory: %v", err)
	}
}
