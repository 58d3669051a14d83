package cmf

import (
	"encoding/json"
	"fmt"
	"github.com/nvg-project/nvg/arch"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"github.com/nvg-project/nvg/internal/atomicfile"
)

// CMF metadata keys and version (DESIGN.md §4).
const (
	CMFVersion     = "1"           // value of __metadata__["cmf"]
	MetaCMF        = "cmf"         // format version key
	MetaArch       = "arch"        // architecture config JSON (arch.Config.JSON)
	MetaCMFTensors = "cmf.tensors" // JSON {name: {"dtype": "blr", "shape": [m, n]}, …}
)

// cmfTensorMeta is one entry of the "cmf.tensors" metadata: a BLR tensor's dtype "blr" and
// logical shape, or a quantized tensor's scheme ("fp8", "q8"), shape, block and the name of
// its scale tensor (quant.go).
type cmfTensorMeta struct {
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Block []int64 `json:"block,omitempty"`
	Scale string  `json:"scale,omitempty"`
}

// applyCMFMetadata checks a CMF file's __metadata__ (version, arch, cmf.tensors) against
// its tensors, turns the U8 entries that cmf.tensors describes into BLR tensors of their
// logical shape, marks the quantized ones (applyQuantMeta; attachScales then gives them
// their scales), and returns the architecture.
func applyCMFMetadata(file string, meta map[string]string, ts []*Tensor) (arch.Config, error) {
	v, ok := meta[MetaCMF]
	if !ok {
		return arch.Config{}, fmt.Errorf("%s: not a CMF file: __metadata__ has no %q version (an HF checkpoint is opened through its directory)", file, MetaCMF)
	}
	if v != CMFVersion {
		return arch.Config{}, fmt.Errorf("%s: unsupported CMF version %q (this reader knows %q)", file, v, CMFVersion)
	}
	archJSON, ok := meta[MetaArch]
	if !ok {
		return arch.Config{}, fmt.Errorf("%s: __metadata__ has no %q", file, MetaArch)
	}
	cfg, err := arch.ParseConfig([]byte(archJSON))
	if err != nil {
		return arch.Config{}, fmt.Errorf("%s: __metadata__ %s: %w", file, MetaArch, err)
	}
	ct, ok := meta[MetaCMFTensors]
	if !ok {
		return arch.Config{}, fmt.Errorf("%s: __metadata__ has no %q", file, MetaCMFTensors)
	}
	keys, raw, err := decodeObject([]byte(ct))
	if err != nil {
		return arch.Config{}, fmt.Errorf("%s: __metadata__ %s: %w", file, MetaCMFTensors, err)
	}
	byName := make(map[string]*Tensor, len(ts))
	for _, t := range ts {
		byName[t.Name] = t
	}
	for _, k := range keys {
		var e cmfTensorMeta
		if err := json.Unmarshal(raw[k], &e); err != nil {
			return arch.Config{}, fmt.Errorf("%s: tensor %s: bad %s entry: %w", file, k, MetaCMFTensors, err)
		}
		switch QuantScheme(e.DType) {
		case QuantFP8, QuantQ8:
			t, ok := byName[k]
			if !ok {
				return arch.Config{}, fmt.Errorf("%s: tensor %s: listed in %s but not in the file", file, k, MetaCMFTensors)
			}
			if err := applyQuantMeta(file, t, e); err != nil {
				return arch.Config{}, err
			}
			continue
		}
		if DType(e.DType) != BLR {
			return arch.Config{}, fmt.Errorf("%s: tensor %s: %s dtype %q, want %q, %q or %q", file, k, MetaCMFTensors, e.DType, BLR, QuantFP8, QuantQ8)
		}
		if len(e.Shape) != 2 || e.Shape[0] <= 0 || e.Shape[1] <= 0 || e.Shape[0] > maxDim || e.Shape[1] > maxDim {
			return arch.Config{}, fmt.Errorf("%s: tensor %s: %s shape %v, want [m, n] of positive sizes", file, k, MetaCMFTensors, e.Shape)
		}
		t, ok := byName[k]
		if !ok {
			return arch.Config{}, fmt.Errorf("%s: tensor %s: listed in %s but not in the file", file, k, MetaCMFTensors)
		}
		if t.DType != U8 || len(t.Shape) != 1 || t.size == 0 {
			return arch.Config{}, fmt.Errorf("%s: tensor %s: a blr tensor must be stored as a non-empty U8 [nbytes] entry, found %s %v", file, k, t.DType, t.Shape)
		}
		t.DType = BLR
		t.Shape = []int{int(e.Shape[0]), int(e.Shape[1])}
	}
	return cfg, nil
}

// WriteCMF writes m as one CMF file at path (DESIGN.md §4): a safetensors file whose
// __metadata__ holds "cmf": "1", "arch" (m.Config.JSON()) and "cmf.tensors" (the logical
// dtype and shape of every BLR tensor, stored as a U8 [nbytes] entry); F32/F16/BF16/F64
// tensors are plain entries. Tensors are written in sorted name order, contiguously (no
// padding between tensors: safetensors readers reject gaps), after a header padded with
// spaces so that the data section starts 8-byte aligned; every tensor is therefore aligned
// when the payloads before it are multiples of 8 bytes (true for BLR when m, n and the rank
// are multiples of 8, as in every Qwen3.5 shape). A quantized tensor (Tensor.Quant) is stored
// as its plain F8_E4M3 or I8 [out, in] codes, followed by its scales (a plain entry named
// ScaleName), and cmf.tensors gives its scheme, block and scale name. m must pass
// Model.Validate. Tensor data are streamed (file-backed tensors are copied, not loaded).
// The write is atomic: a temporary file in the same directory is written, fsynced and
// renamed over path, then the directory is fsynced; on error the previous file at path is
// untouched and the temporary file is removed.
func WriteCMF(path string, m *Model) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	ts := make([]*Tensor, 0, len(m.Tensors))
	for _, n := range m.Names() {
		ts = append(ts, m.Tensors[n])
	}
	return writeCMFFile(path, m.Config, withScales(ts))
}

// cmfHeader builds the padded JSON header for ts (in order) and returns it with the data size.
func cmfHeader(cfg arch.Config, ts []*Tensor) ([]byte, int64, error) {
	blr := map[string]cmfTensorMeta{}
	entries := map[string]any{}
	var off int64
	for _, t := range ts {
		e := headerEntry{DType: string(t.DType), DataOffsets: []int64{off, off + t.size}}
		if t.Quant != nil {
			blr[t.Name] = quantMeta(t)
		}
		if t.DType == BLR {
			if len(t.Shape) != 2 || t.size == 0 {
				return nil, 0, fmt.Errorf("tensor %s: blr needs a logical shape [m, n] and a payload, got %v and %d bytes", t.Name, t.Shape, t.size)
			}
			blr[t.Name] = cmfTensorMeta{DType: string(BLR), Shape: []int64{int64(t.Shape[0]), int64(t.Shape[1])}}
			e.DType = string(U8)
			e.Shape = []int64{t.size}
		} else {
			n, err := numElements(t.Shape)
			if err != nil {
				return nil, 0, fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			if t.DType.Size() == 0 || n*int64(t.DType.Size()) != t.size {
				return nil, 0, fmt.Errorf("tensor %s: %d bytes for shape %v of dtype %s", t.Name, t.size, t.Shape, t.DType)
			}
			e.Shape = make([]int64, len(t.Shape))
			for i, d := range t.Shape {
				e.Shape[i] = int64(d)
			}
		}
		if _, dup := entries[t.Name]; dup || t.Name == "__metadata__" || t.Name == "" {
			return nil, 0, fmt.Errorf("tensor %q: duplicate or reserved name", t.Name)
		}
		entries[t.Name] = e
		off += t.size
	}
	blrJSON, err := json.Marshal(blr)
	if err != nil {
		return nil, 0, err
	}
	entries["__metadata__"] = map[string]string{
		MetaCMF:        CMFVersion,
		MetaArch:       string(cfg.JSON()),
		MetaCMFTensors: string(blrJSON),
	}
	h, err := json.Marshal(entries) // map keys sorted: __metadata__ first, then names
	if err != nil {
		return nil, 0, err
	}
	return padHeader(h), off, nil
}

func writeCMFFile(path string, cfg arch.Config, ts []*Tensor) error {
	h, _, err := cmfHeader(cfg, ts)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return atomicfile.Write(path, func(w io.Writer) error { return writeHeaderAndTensors(w, h, ts) })
}

// shardBySize cuts items, in order, into shards of at most maxBytes (by size) each, a new
// shard starting where the next item would pass maxBytes; an item larger than maxBytes gets
// a shard of its own. It returns the shards and the total size.
func shardBySize[T any](items []T, size func(T) int64, maxBytes int64) (shards [][]T, total int64) {
	var cur []T
	var curBytes int64
	for _, it := range items {
		s := size(it)
		if len(cur) > 0 && curBytes+s > maxBytes {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, it)
		curBytes += s
		total += s
	}
	if len(cur) > 0 {
		shards = append(shards, cur)
	}
	return shards, total
}

var shardNameRE = regexp.MustCompile(`^model-[0-9]{5}-of-[0-9]{5}\.cmf$`)

// ShardName is the file name of shard i (1-based) of n: model-0000i-of-0000N.cmf.
func ShardName(i, n int) string { return fmt.Sprintf("model-%05d-of-%05d.cmf", i, n) }

// WriteCMFSharded writes m into directory dir (created if missing) as CMF shards
// model-0000i-of-0000N.cmf, each a complete CMF file (same arch, its own cmf.tensors) of at
// most maxShardBytes of tensor data (a larger tensor gets a shard of its own), filled in
// sorted name order (a quantized tensor's scales in its shard, right after it), plus model.cmf.index.json {"metadata": {"total_size", "cmf", "arch"},
// "weight_map": {tensor: shard}}. Each file is written atomically (see WriteCMF), the
// index last, then shards of an earlier write that the new index does not name are
// removed; the set of files as a whole is not replaced atomically. m must pass
// Model.Validate; maxShardBytes must be positive.
func WriteCMFSharded(dir string, m *Model, maxShardBytes int64) error {
	if maxShardBytes <= 0 {
		return fmt.Errorf("write %s: maxShardBytes must be positive, got %d", dir, maxShardBytes)
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	ts := make([]*Tensor, 0, len(m.Tensors))
	for _, n := range m.Names() {
		ts = append(ts, m.Tensors[n])
	}
	shards, total := shardBySize(ts, (*Tensor).QuantBytes, maxShardBytes)
	if len(shards) > 99999 {
		return fmt.Errorf("write %s: %d shards exceed the 5-digit shard numbering; raise maxShardBytes", dir, len(shards))
	}
	wm := map[string]string{}
	keep := map[string]bool{}
	for i, ts := range shards {
		name := ShardName(i+1, len(shards))
		keep[name] = true
		ts = withScales(ts)
		if err := writeCMFFile(filepath.Join(dir, name), m.Config, ts); err != nil {
			return err
		}
		for _, t := range ts {
			wm[t.Name] = name
		}
	}
	ix := ShardIndex{
		Metadata:  map[string]any{"total_size": total, MetaCMF: CMFVersion, MetaArch: string(m.Config.JSON())},
		WeightMap: wm,
	}
	data, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, CMFIndexName), append(data, '\n')); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("write %s: listing old shards: %w", dir, err)
	}
	var stale []string
	for _, e := range ents {
		if shardNameRE.MatchString(e.Name()) && !keep[e.Name()] {
			stale = append(stale, e.Name())
		}
	}
	sort.Strings(stale)
	for _, s := range stale {
		if err := os.Remove(filepath.Join(dir, s)); err != nil {
			return fmt.Errorf("write %s: removing stale shard: %w", dir, err)
		}
	}
	return nil
}
