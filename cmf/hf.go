package cmf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nvg-project/nvg/arch"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// File names of the checkpoint layouts Open understands.
const (
	HFConfigName      = "config.json"                  // HF architecture config
	HFWeightsName     = "model.safetensors"            // HF single-file weights
	HFIndexName       = "model.safetensors.index.json" // HF shard index
	CMFFileName       = "model.cmf"                    // single CMF file inside a directory
	CMFIndexName      = "model.cmf.index.json"         // CMF shard index (WriteCMFSharded)
	maxSmallFileBytes = 64 << 20                       // bound for config.json and index files
)

// Open opens a model from path, reading only headers (tensor data are read lazily on
// Tensor.Bytes), and checks it with Model.Validate. path may be
//
//   - an HF checkpoint directory: config.json (flat or with a nested text_config) and either
//     model.safetensors or model.safetensors.index.json with its shards. Tensor names are
//     mapped to HF text names (see HFTextName); a tied head drops lm_head.weight. A
//     block-wise FP8 checkpoint (quantization_config {"quant_method": "fp8",
//     "weight_block_size": [br, bc]}) gives its F8_E4M3 weights their weight_scale_inv
//     tensors (Tensor.Quant, QuantFP8), found in any shard; any other quantization is refused
//     naming its method;
//   - a .cmf file (DESIGN.md §4), or a directory holding model.cmf;
//   - a sharded CMF: its model.cmf.index.json or the directory holding it;
//   - an HF index file model.safetensors.index.json (its directory is opened).
//
// A directory with both an HF config.json and a CMF index or file is ambiguous and is
// rejected; open the file you mean. Errors name the file and, where there is one, the
// tensor. Call Close when done.
func Open(path string) (*Model, error) {
	return openAny(osFiles{}, path)
}

// OpenFS is Open on a file system (an embed.FS, fstest.MapFS, os.DirFS…); name is a
// slash-separated path inside fsys (fs.ValidPath), "." for its root. Files that implement
// io.ReaderAt (embed.FS, os.DirFS) are read lazily; others with io.Seeker are read
// through a mutex; others are read whole when opened.
func OpenFS(fsys fs.FS, name string) (*Model, error) {
	if !fs.ValidPath(name) {
		return nil, fmt.Errorf("OpenFS: %q is not a valid fs path", name)
	}
	return openAny(fsFiles{fsys}, name)
}

// HFTextName maps an HF checkpoint tensor name to the text-model name nvg uses:
// `model.language_model.X` becomes `model.X` (vision-language checkpoints), names under
// `mtp.` (multi-token prediction) and `model.visual.` (vision tower) are dropped (keep is
// false), anything else is kept unchanged.
func HFTextName(name string) (mapped string, keep bool) {
	switch {
	case strings.HasPrefix(name, "mtp."), strings.HasPrefix(name, "model.visual."):
		return "", false
	case strings.HasPrefix(name, "model.language_model."):
		return "model." + strings.TrimPrefix(name, "model.language_model."), true
	}
	return name, true
}

// ShardIndex is the index of a sharded checkpoint: HF's model.safetensors.index.json or
// nvg's model.cmf.index.json, {"metadata": {...}, "weight_map": {tensor: shard file}}.
type ShardIndex struct {
	// Metadata is free-form; HF writes "total_size" (bytes), a CMF index also "cmf" (the
	// version, "1") and "arch" (the config JSON as a string).
	Metadata map[string]any `json:"metadata"`
	// WeightMap maps every tensor name to the shard file holding it, a plain file name in
	// the index's directory.
	WeightMap map[string]string `json:"weight_map"`
}

// ParseShardIndex parses and checks an index file: a JSON object with a non-empty
// weight_map of non-empty tensor names to shard file names. A shard name must be a plain
// file name in the index's directory: not empty, ".", "..", absolute, and without
// '/', '\\', ':' or NUL (so that no shard can escape the model directory).
func ParseShardIndex(data []byte) (*ShardIndex, error) {
	if _, _, err := decodeObject(data); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	var ix ShardIndex
	if err := json.Unmarshal(data, &ix); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if len(ix.WeightMap) == 0 {
		return nil, fmt.Errorf("index: weight_map is missing or empty")
	}
	for _, t := range sortedKeys(ix.WeightMap) {
		if t == "" {
			return nil, fmt.Errorf("index: weight_map has an empty tensor name")
		}
		if err := checkShardName(ix.WeightMap[t]); err != nil {
			return nil, fmt.Errorf("index: weight_map[%q]: %w", t, err)
		}
	}
	return &ix, nil
}

func checkShardName(s string) error {
	switch {
	case s == "" || s == "." || s == "..":
		return fmt.Errorf("shard file %q is not a file name", s)
	case strings.ContainsAny(s, "/\\:\x00") || filepath.IsAbs(s) || !fs.ValidPath(s):
		return fmt.Errorf("shard file %q must be a plain file name in the model directory (no path separators, drive or ..)", s)
	}
	return nil
}

// Shards returns the distinct shard file names, sorted.
func (ix *ShardIndex) Shards() []string {
	set := map[string]bool{}
	for _, s := range ix.WeightMap {
		set[s] = true
	}
	return sortedKeys(set)
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// files abstracts the operating system and an fs.FS for the openers.
type files interface {
	// open opens name for random access.
	open(name string) (r io.ReaderAt, size int64, c io.Closer, err error)
	// stat reports whether name exists and is a directory.
	stat(name string) (exists, isDir bool, err error)
	join(dir, name string) string
	split(name string) (dir, base string)
}

type osFiles struct{}

func (osFiles) open(name string) (io.ReaderAt, int64, io.Closer, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, nil, fmt.Errorf("%s: not a regular file", name)
	}
	return f, st.Size(), f, nil
}

func (osFiles) stat(name string) (bool, bool, error) {
	st, err := os.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, st.IsDir(), nil
}

func (osFiles) join(dir, name string) string { return filepath.Join(dir, name) }
func (osFiles) split(name string) (string, string) {
	return filepath.Dir(name), filepath.Base(name)
}

type fsFiles struct{ fsys fs.FS }

func (f fsFiles) open(name string) (io.ReaderAt, int64, io.Closer, error) {
	file, err := f.fsys.Open(name)
	if err != nil {
		return nil, 0, nil, err
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, 0, nil, err
	}
	if !st.Mode().IsRegular() {
		file.Close()
		return nil, 0, nil, fmt.Errorf("%s: not a regular file", name)
	}
	switch x := file.(type) {
	case io.ReaderAt:
		return x, st.Size(), file, nil
	case io.ReadSeeker:
		return &seekReaderAt{rs: x}, st.Size(), file, nil
	}
	b, err := io.ReadAll(io.LimitReader(file, st.Size()+1))
	file.Close()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%s: %w", name, err)
	}
	return bytes.NewReader(b), int64(len(b)), io.NopCloser(nil), nil
}

func (f fsFiles) stat(name string) (bool, bool, error) {
	st, err := fs.Stat(f.fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, st.IsDir(), nil
}

func (fsFiles) join(dir, name string) string { return path.Join(dir, name) }
func (fsFiles) split(name string) (string, string) {
	return path.Dir(name), path.Base(name)
}

// seekReaderAt serialises ReadAt on a ReadSeeker.
type seekReaderAt struct {
	mu sync.Mutex
	rs io.ReadSeeker
}

func (s *seekReaderAt) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.rs.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	return io.ReadFull(s.rs, p)
}

// readSmall reads a whole small file (config, index), refusing more than maxSmallFileBytes.
func readSmall(fsys files, name string) ([]byte, error) {
	r, size, c, err := fsys.open(name)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if size > maxSmallFileBytes {
		return nil, fmt.Errorf("%s: %d bytes is too large for this file (limit %d)", name, size, maxSmallFileBytes)
	}
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && size == 0) {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// modelForms says what Open reads, for the error of a file that is none of it.
const modelForms = "nvg opens as a model an HF checkpoint directory (config.json with model.safetensors or model.safetensors.index.json), a .cmf file, or a sharded CMF model (its directory or its .cmf.index.json)"

func openAny(fsys files, name string) (*Model, error) {
	exists, isDir, err := fsys.stat(name)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%s: no such file or directory", name)
	}
	var m *Model
	if isDir {
		m, err = openDir(fsys, name)
	} else {
		dir, base := fsys.split(name)
		switch {
		case strings.HasSuffix(base, ".cmf.index.json"):
			m, err = openShardedCMF(fsys, name)
		case base == HFIndexName:
			m, err = openHF(fsys, dir, true)
		default:
			m, err = openCMFFile(fsys, name)
			if errors.Is(err, ErrNotSafetensors) { // not a model file at all: say what is
				err = fmt.Errorf("%w; %s", err, modelForms)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	m.Source = name
	if err := m.Validate(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func openDir(fsys files, dir string) (*Model, error) {
	var asDir []string // a model file's name taken by a directory
	has := func(n string) bool {
		ok, isDir, _ := fsys.stat(fsys.join(dir, n))
		if ok && isDir {
			asDir = append(asDir, n)
		}
		return ok && !isDir
	}
	hf, cmfIdx, cmfFile := has(HFConfigName), has(CMFIndexName), has(CMFFileName)
	if !hf && !cmfIdx && !cmfFile && len(asDir) > 0 {
		return nil, fmt.Errorf("%s: %s is a directory, not a file: not an HF checkpoint (config.json) or a CMF model (%s or %s)",
			dir, fsys.join(dir, asDir[0]), CMFIndexName, CMFFileName)
	}
	switch {
	case hf && (cmfIdx || cmfFile):
		return nil, fmt.Errorf("%s: holds both an HF checkpoint (config.json) and a CMF model (%s or %s); open the file you mean", dir, CMFIndexName, CMFFileName)
	case cmfIdx && cmfFile:
		return nil, fmt.Errorf("%s: holds both %s and %s; open the file you mean", dir, CMFIndexName, CMFFileName)
	case cmfIdx:
		return openShardedCMF(fsys, fsys.join(dir, CMFIndexName))
	case cmfFile:
		return openCMFFile(fsys, fsys.join(dir, CMFFileName))
	case hf:
		return openHF(fsys, dir, false)
	}
	return nil, fmt.Errorf("%s: no config.json (not an HF checkpoint) and no %s or %s (not a CMF model)", dir, CMFIndexName, CMFFileName)
}

// openedFiles collects the files opened so far, to close them on error.
type openedFiles []io.Closer

func (o openedFiles) closeAll() {
	for _, c := range o {
		c.Close()
	}
}

func openHeader(fsys files, name string, opened *openedFiles) (map[string]string, []*Tensor, error) {
	r, size, c, err := fsys.open(name)
	if err != nil {
		return nil, nil, err
	}
	*opened = append(*opened, c)
	return ParseSafetensorsHeader(r, size, name)
}

// openHF opens an HF checkpoint directory: model.safetensors when present (as transformers
// does), else the index; with useIndex, the index.
func openHF(fsys files, dir string, useIndex bool) (_ *Model, err error) {
	cfgPath := fsys.join(dir, HFConfigName)
	if ok, _, _ := fsys.stat(cfgPath); !ok {
		return nil, fmt.Errorf("%s: no config.json: not an HF checkpoint directory", dir)
	}
	cfgBytes, err := readSmall(fsys, cfgPath)
	if err != nil {
		return nil, err
	}
	cfg, err := arch.ParseConfig(cfgBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	var opened openedFiles
	defer func() {
		if err != nil {
			opened.closeAll()
		}
	}()
	var raw []*Tensor
	single := fsys.join(dir, HFWeightsName)
	indexPath := fsys.join(dir, HFIndexName)
	if ok, _, _ := fsys.stat(single); ok && !useIndex {
		_, raw, err = openHeader(fsys, single, &opened)
		if err != nil {
			return nil, err
		}
	} else if ok, _, _ := fsys.stat(indexPath); ok {
		raw, _, err = openShards(fsys, dir, indexPath, &opened, nil)
		if err != nil {
			return nil, err
		}
	} else {
		return nil, fmt.Errorf("%s: has config.json but neither %s nor %s", dir, HFWeightsName, HFIndexName)
	}
	m := &Model{Config: cfg, Tensors: map[string]*Tensor{}}
	origin := map[string]string{}
	for _, t := range raw {
		name, keep := HFTextName(t.Name)
		if !keep || ((name == "lm_head.weight" || name == ScaleName(QuantFP8, "lm_head.weight")) && cfg.TieWordEmbeddings) {
			continue
		}
		if prev, dup := origin[name]; dup {
			return nil, fmt.Errorf("%s: tensors %s and %s both map to %s", t.file, prev, t.Name, name)
		}
		origin[name] = t.Name
		t.Name = name
		m.Tensors[name] = t
	}
	if err := attachHFFP8(cfgPath, cfgBytes, m.Tensors); err != nil {
		return nil, err
	}
	m.closers = opened
	return m, nil
}

// openShards reads a shard index and every shard's header, checking that each tensor of a
// shard is listed in weight_map for that shard and vice versa. shardMeta, when not nil, is
// called with each shard's metadata and tensors (the CMF reader's checks).
func openShards(fsys files, dir, indexPath string, opened *openedFiles,
	shardMeta func(shard string, meta map[string]string, ts []*Tensor) error) ([]*Tensor, *ShardIndex, error) {
	data, err := readSmall(fsys, indexPath)
	if err != nil {
		return nil, nil, err
	}
	ix, err := ParseShardIndex(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", indexPath, err)
	}
	var all []*Tensor
	found := 0
	for _, shard := range ix.Shards() {
		p := fsys.join(dir, shard)
		meta, ts, err := openHeader(fsys, p, opened)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: shard %s: %w", indexPath, shard, err)
		}
		for _, t := range ts {
			want, ok := ix.WeightMap[t.Name]
			if !ok {
				return nil, nil, fmt.Errorf("%s: tensor %s is not in the weight_map of %s", p, t.Name, indexPath)
			}
			if want != shard {
				return nil, nil, fmt.Errorf("%s: tensor %s: weight_map of %s places it in %s", p, t.Name, indexPath, want)
			}
			found++
		}
		if shardMeta != nil {
			if err := shardMeta(p, meta, ts); err != nil {
				return nil, nil, err
			}
		}
		all = append(all, ts...)
	}
	if found != len(ix.WeightMap) {
		have := map[string]bool{}
		for _, t := range all {
			have[t.Name] = true
		}
		for _, n := range sortedKeys(ix.WeightMap) {
			if !have[n] {
				return nil, nil, fmt.Errorf("%s: tensor %s: weight_map places it in %s but that shard does not hold it", indexPath, n, ix.WeightMap[n])
			}
		}
	}
	return all, ix, nil
}

// openShardedCMF opens a CMF index and its shards: each shard is a complete CMF file whose
// arch must equal the index's.
func openShardedCMF(fsys files, indexPath string) (_ *Model, err error) {
	dir, _ := fsys.split(indexPath)
	var opened openedFiles
	defer func() {
		if err != nil {
			opened.closeAll()
		}
	}()
	var cfg *arch.Config
	check := func(shard string, meta map[string]string, ts []*Tensor) error {
		c, err := applyCMFMetadata(shard, meta, ts)
		if err != nil {
			return err
		}
		if cfg == nil {
			cfg = &c
		} else if !reflect.DeepEqual(*cfg, c) {
			return fmt.Errorf("%s: arch differs from the other shards'", shard)
		}
		return nil
	}
	ts, ix, err := openShards(fsys, dir, indexPath, &opened, check)
	if err != nil {
		return nil, err
	}
	if v, ok := ix.Metadata["cmf"]; !ok || v != CMFVersion {
		return nil, fmt.Errorf("%s: metadata \"cmf\" is %v, want %q", indexPath, v, CMFVersion)
	}
	if a, ok := ix.Metadata["arch"].(string); ok {
		c, err := arch.ParseConfig([]byte(a))
		if err != nil {
			return nil, fmt.Errorf("%s: metadata arch: %w", indexPath, err)
		}
		if !reflect.DeepEqual(*cfg, c) {
			return nil, fmt.Errorf("%s: metadata arch differs from the shards' arch", indexPath)
		}
	} else {
		return nil, fmt.Errorf("%s: metadata has no \"arch\" string", indexPath)
	}
	if ts, err = attachScales(indexPath, ts); err != nil {
		return nil, err
	}
	m := &Model{Config: *cfg, Tensors: map[string]*Tensor{}, closers: opened}
	for _, t := range ts {
		m.Tensors[t.Name] = t
	}
	return m, nil
}

func openCMFFile(fsys files, name string) (_ *Model, err error) {
	var opened openedFiles
	defer func() {
		if err != nil {
			opened.closeAll()
		}
	}()
	meta, ts, err := openHeader(fsys, name, &opened)
	if err != nil {
		return nil, err
	}
	cfg, err := applyCMFMetadata(name, meta, ts)
	if err != nil {
		return nil, err
	}
	if ts, err = attachScales(name, ts); err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, Tensors: map[string]*Tensor{}, closers: opened}
	for _, t := range ts {
		m.Tensors[t.Name] = t
	}
	return m, nil
}
