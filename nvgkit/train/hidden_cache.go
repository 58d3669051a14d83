package train

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/internal/diskspace"
	"github.com/nvg-project/nvg/nvgkit"
)

// HiddenCache holds the teacher's hidden states (nvgkit.HiddenStates, binary16) at the
// outputs of some decoder layers for a fixed, ordered set of N windows of T tokens: the
// targets of a run's hidden-state loss (TrainConfig.HiddenLoss), taken in the teacher pass
// beside the top-k. It lives in host memory (NewHiddenCache, Put) or in a file
// (WriteHiddenCache, OpenHiddenCache) that Get reads a step's windows from, so a long run
// holds no more than one step's states in memory. Each window takes
// nvgkit.HiddenStateBytes(H, T, len(Layers)) bytes: the tiny teacher's default run (96
// windows of 64 tokens, hidden 256, all 8 layers) 24 MiB; a 0.8B run (hidden 1024) 1 MiB per
// window of 512 tokens per layer, 9.4 GiB per layer for 600 steps of 16 windows.
//
// File format (little-endian), written atomically by WriteHiddenCache: a 96-byte header —
// magic "NVGHID01", u32 version 1, u32 the number of layers Ls, u64 N, u64 T, u64 H, the
// 32-byte key (the Trainer's TopKKey of the windows and the teacher), 16 zero bytes — then
// Ls u32 layer indices, then per window one record: for each layer in order its T·H binary16
// values (row = position), then the u32 CRC-32C (Castagnoli) of the record's values. The file
// size must be exactly HiddenCacheSize(N, T, H, Ls).
type HiddenCache struct {
	// N windows of T tokens, hidden size H, at the outputs of decoder layers Layers.
	N, T, H int
	Layers  []int
	// Key names the windows and the teacher (TopKKey).
	Key [32]byte

	mem  [][]uint16 // per window: the record's values (memory caches; nil until Put)
	f    *os.File   // the file of a file-backed cache
	path string
}

const (
	hiddenMagic      = "NVGHID01"
	hiddenVersion    = 1
	hiddenHeaderSize = 96
)

// HiddenCacheSize is the exact size in bytes of a hidden-state cache file of n windows of t
// tokens, hidden size h, at layers layers: 96 + 4·layers + n·(2·layers·t·h + 4).
func HiddenCacheSize(n, t, h, layers int) int64 {
	return hiddenHeaderSize + 4*int64(layers) + int64(n)*(nvgkit.HiddenStateBytes(h, t, layers)+4)
}

// checkHiddenShape validates a cache's shape (op names the caller).
func checkHiddenShape(op string, n, t, h int, layers []int) error {
	if n < 1 || t < 1 || h < 1 || len(layers) == 0 {
		return fmt.Errorf("train.%s: n=%d t=%d h=%d with %d layers, want n, t, h ≥ 1 and at least one layer", op, n, t, h, len(layers))
	}
	if float64(t)*float64(h)*float64(len(layers)) > math.MaxInt32 {
		return fmt.Errorf("train.%s: a window's record of %d layers × %d tokens × %d is beyond 2³¹ values", op, len(layers), t, h)
	}
	for i, l := range layers {
		if l < 0 || (i > 0 && l <= layers[i-1]) {
			return fmt.Errorf("train.%s: layers %v, want ascending, distinct, ≥ 0", op, layers)
		}
	}
	return nil
}

// NewHiddenCache returns an empty in-memory cache for n windows of t tokens of hidden size
// h at the given layers, named by key. Errors: a bad shape.
func NewHiddenCache(n, t, h int, layers []int, key [32]byte) (*HiddenCache, error) {
	if err := checkHiddenShape("NewHiddenCache", n, t, h, layers); err != nil {
		return nil, err
	}
	return &HiddenCache{N: n, T: t, H: h, Layers: slices.Clone(layers), Key: key, mem: make([][]uint16, n)}, nil
}

// record returns the record of hs's window w: its values for every layer, in order.
func (c *HiddenCache) record(hs *nvgkit.HiddenStates, w int) []uint16 {
	th := c.T * c.H
	rec := make([]uint16, 0, th*len(c.Layers))
	for _, p := range hs.F16 {
		rec = append(rec, p[w*th:(w+1)*th]...)
	}
	return rec
}

// checkStates validates hs for windows first … first+hs.NB−1 of the cache.
func (c *HiddenCache) checkStates(first int, hs *nvgkit.HiddenStates) error {
	if hs == nil || hs.T != c.T || hs.H != c.H || !slices.Equal(hs.Layers, c.Layers) || len(hs.F16) != len(c.Layers) {
		return fmt.Errorf("train.HiddenCache.Put: hidden states do not match the cache (T=%d, H=%d, layers %v)", c.T, c.H, c.Layers)
	}
	if first < 0 || hs.NB < 1 || first+hs.NB > c.N {
		return fmt.Errorf("train.HiddenCache.Put: windows %d…%d outside [0, %d)", first, first+hs.NB-1, c.N)
	}
	for _, p := range hs.F16 {
		if len(p) != hs.NB*c.T*c.H {
			return fmt.Errorf("train.HiddenCache.Put: a plane of %d values, want NB·T·H = %d", len(p), hs.NB*c.T*c.H)
		}
	}
	return nil
}

// Put stores hs, the teacher's states of windows first … first+hs.NB−1, in a memory cache.
// Errors: a file-backed cache, a shape that does not match, windows beyond N.
func (c *HiddenCache) Put(first int, hs *nvgkit.HiddenStates) error {
	if c.mem == nil {
		return errors.New("train.HiddenCache.Put: the cache is a file (WriteHiddenCache fills it)")
	}
	if err := c.checkStates(first, hs); err != nil {
		return err
	}
	for w := range hs.NB {
		c.mem[first+w] = c.record(hs, w)
	}
	return nil
}

// Get returns the states of windows first … first+n−1 as one HiddenStates of n windows
// (fresh copies; a file-backed cache reads them and checks each record's CRC). Errors: a range
// outside [0, N), a window not stored yet, an I/O error or a corrupt record (naming the file
// and the window).
func (c *HiddenCache) Get(first, n int) (*nvgkit.HiddenStates, error) {
	if n < 1 || first < 0 || first+n > c.N {
		return nil, fmt.Errorf("train.HiddenCache.Get: windows %d…%d outside [0, %d)", first, first+n-1, c.N)
	}
	th, ls := c.T*c.H, len(c.Layers)
	hs := &nvgkit.HiddenStates{NB: n, T: c.T, H: c.H, Layers: slices.Clone(c.Layers), F16: make([][]uint16, ls)}
	for i := range hs.F16 {
		hs.F16[i] = make([]uint16, n*th)
	}
	put := func(w int, rec []uint16) {
		for i := range ls {
			copy(hs.F16[i][w*th:(w+1)*th], rec[i*th:(i+1)*th])
		}
	}
	if c.mem != nil {
		for w := range n {
			rec := c.mem[first+w]
			if rec == nil {
				return nil, fmt.Errorf("train.HiddenCache.Get: window %d has not been computed", first+w)
			}
			put(w, rec)
		}
		return hs, nil
	}
	recBytes := 2*int64(ls*th) + 4
	buf := make([]byte, int64(n)*recBytes)
	if _, err := c.f.ReadAt(buf, hiddenHeaderSize+4*int64(ls)+int64(first)*recBytes); err != nil {
		return nil, fmt.Errorf("train: hidden-state cache %s: windows %d…%d: %w", c.path, first, first+n-1, err)
	}
	rec := make([]uint16, ls*th)
	for w := range n {
		b := buf[int64(w)*recBytes : int64(w+1)*recBytes]
		vals := b[:len(b)-4]
		if got, want := crc32.Checksum(vals, castagnoli), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
			return nil, fmt.Errorf("train: hidden-state cache %s: window %d: checksum %08x, want %08x (corrupt; remove the file to run the teacher pass again)", c.path, first+w, got, want)
		}
		for i := range rec {
			rec[i] = binary.LittleEndian.Uint16(vals[2*i:])
		}
		put(w, rec)
	}
	return hs, nil
}

// Close closes a file-backed cache's file (a memory cache has none).
func (c *HiddenCache) Close() error {
	if c == nil || c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	return err
}

// WriteHiddenCache writes the cache file path atomically (internal/atomicfile) from fill,
// which must call put with the states of every window in order (first = 0, then each call's
// first the previous one's end), and opens it for reading. On any error — fill's, a window
// out of order or missing, I/O — path is left as it was. A file system with less free
// space than HiddenCacheSize is refused before fill runs (where the platform reports it).
// Errors name path.
func WriteHiddenCache(path string, n, t, h int, layers []int, key [32]byte, fill func(put func(first int, hs *nvgkit.HiddenStates) error) error) (*HiddenCache, error) {
	if err := checkHiddenShape("WriteHiddenCache", n, t, h, layers); err != nil {
		return nil, err
	}
	need := HiddenCacheSize(n, t, h, len(layers))
	if free, ok, err := diskspace.Available(filepath.Dir(path)); err == nil && ok && free < need {
		return nil, fmt.Errorf("train: the teacher's hidden states of layers %v (%d windows × %d tokens, hidden %d) need %s in %s, which has %s free: free space, write the run elsewhere, match fewer layers (TrainConfig.HiddenLayers, nvg distill --hidden-layers) or train on the KL alone (HiddenLoss \"\", --hidden-loss none)",
			layers, n, t, h, humanBytes(uint64(need)), path, humanBytes(uint64(free)))
	}
	c := &HiddenCache{N: n, T: t, H: h, Layers: slices.Clone(layers), Key: key}
	err := atomicfile.Write(path, func(w io.Writer) error {
		var hd [hiddenHeaderSize]byte
		copy(hd[:8], hiddenMagic)
		binary.LittleEndian.PutUint32(hd[8:], hiddenVersion)
		binary.LittleEndian.PutUint32(hd[12:], uint32(len(layers)))
		binary.LittleEndian.PutUint64(hd[16:], uint64(n))
		binary.LittleEndian.PutUint64(hd[24:], uint64(t))
		binary.LittleEndian.PutUint64(hd[32:], uint64(h))
		copy(hd[40:72], key[:])
		out := append(make([]byte, 0, hiddenHeaderSize+4*len(layers)), hd[:]...)
		for _, l := range layers {
			out = binary.LittleEndian.AppendUint32(out, uint32(l))
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
		next := 0
		err := fill(func(first int, hs *nvgkit.HiddenStates) error {
			if first != next {
				return fmt.Errorf("windows from %d given, the file is at window %d (they go in order)", first, next)
			}
			if err := c.checkStates(first, hs); err != nil {
				return err
			}
			for win := range hs.NB {
				b := make([]byte, 0, 2*len(c.Layers)*t*h+4)
				for _, v := range c.record(hs, win) {
					b = binary.LittleEndian.AppendUint16(b, v)
				}
				b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
				if _, err := w.Write(b); err != nil {
					return err
				}
			}
			next += hs.NB
			return nil
		})
		if err == nil && next != n {
			err = fmt.Errorf("%d of %d windows written", next, n)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("train: hidden-state cache: %w", err)
	}
	return OpenHiddenCache(path)
}

// OpenHiddenCache opens a cache file written by WriteHiddenCache for reading (Get reads the
// records when asked and checks their CRCs). It checks the magic, version, shape, layers and
// that the size is exactly HiddenCacheSize; each failure is an error naming path and what is
// wrong (a truncated file is never half-used).
func OpenHiddenCache(path string) (*HiddenCache, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("train: hidden-state cache: %w", err)
	}
	bad := func(format string, a ...any) (*HiddenCache, error) {
		f.Close()
		return nil, fmt.Errorf("train: hidden-state cache %s: "+format+" (remove the file to run the teacher pass again)", append([]any{path}, a...)...)
	}
	r := bufio.NewReader(f)
	var hd [hiddenHeaderSize]byte
	if _, err := io.ReadFull(r, hd[:]); err != nil {
		return bad("header: %v (not a hidden-state cache or truncated)", err)
	}
	if string(hd[:8]) != hiddenMagic {
		return bad("bad magic %q, want %q", hd[:8], hiddenMagic)
	}
	if v := binary.LittleEndian.Uint32(hd[8:]); v != hiddenVersion {
		return bad("version %d, want %d", v, hiddenVersion)
	}
	ls := binary.LittleEndian.Uint32(hd[12:])
	n64, t64, h64 := binary.LittleEndian.Uint64(hd[16:]), binary.LittleEndian.Uint64(hd[24:]), binary.LittleEndian.Uint64(hd[32:])
	if ls < 1 || ls > 1<<16 || n64 > math.MaxInt32 || t64 > math.MaxInt32 || h64 > math.MaxInt32 {
		return bad("bad shape: %d layers, N=%d T=%d H=%d", ls, n64, t64, h64)
	}
	layers := make([]int, ls)
	var b [4]byte
	for i := range layers {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return bad("layer list: %v", err)
		}
		layers[i] = int(binary.LittleEndian.Uint32(b[:]))
	}
	n, t, h := int(n64), int(t64), int(h64)
	if err := checkHiddenShape("OpenHiddenCache", n, t, h, layers); err != nil {
		return bad("%v", err)
	}
	st, err := f.Stat()
	if err != nil {
		return bad("%v", err)
	}
	if want := HiddenCacheSize(n, t, h, len(layers)); st.Size() != want {
		return bad("size %d bytes, want %d for N=%d T=%d H=%d and %d layers (truncated or corrupt)", st.Size(), want, n, t, h, len(layers))
	}
	c := &HiddenCache{N: n, T: t, H: h, Layers: layers, f: f, path: path}
	copy(c.Key[:], hd[40:72])
	return c, nil
}
