package train

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/nvgkit"
	"hash/crc32"
	"io"
	"math"
	"os"

	"github.com/nvg-project/nvg/internal/atomicfile"
)

// TopKCache holds the teacher's top-k (TopK) for a fixed, ordered set of N windows of T
// tokens, either in host memory or in a file, so that the teacher pass runs once per window
// set. Window i's rows are rows i·T … i·T+T−1 of the concatenation. Windows names the set by
// a hash of the windows' token ids (HashWindows), so a file made for other windows is never
// used by mistake.
//
// File format (little-endian), written atomically by Save (temporary file, fsync, rename):
// an 80-byte header — magic "NVGTOPK1", u32 version 1, u32 K, u64 N, u64 T, u32 CRC-32C
// (Castagnoli) of everything after the header, u32 zero, the 32-byte window hash, 8 zero
// bytes — then IDs int32[N·T·K], Probs f32[N·T·K], LogProbs f32[N·T·K], LSE f32[N·T]. The
// file size must be exactly 80 + 4·N·T·(3K+1) bytes.
type TopKCache struct {
	// N windows of T tokens, K entries per token.
	N, T, K int
	// Windows names what the entries belong to: HashWindows of the windows, or for a
	// Trainer's cache TopKKey of them and the teacher.
	Windows [32]byte

	ids          []int32
	probs, logps []float32
	lse          []float32
	have         []bool // window i filled (memory caches built by Put)
}

const (
	topkMagic      = "NVGTOPK1"
	topkVersion    = 1
	topkHeaderSize = 80
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// HashWindows returns the SHA-256 of the windows' lengths and token ids (each window: its
// length, then its ids, as little-endian u32), naming a window set.
func HashWindows(windows [][]int) [32]byte {
	h := sha256.New()
	var b [4]byte
	for _, w := range windows {
		binary.LittleEndian.PutUint32(b[:], uint32(len(w)))
		h.Write(b[:])
		for _, id := range w {
			binary.LittleEndian.PutUint32(b[:], uint32(id))
			h.Write(b[:])
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// TopKKey names the teacher's top-k of a window set for a TopKCache: the SHA-256 of
// windows (HashWindows), the teacher's architecture (cfg.JSON()) and teacherID (a name for
// its weights, such as their path; "" for none), each length-prefixed. T and K are in the
// cache's header.
func TopKKey(windows [32]byte, cfg arch.Config, teacherID string) [32]byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte("nvg top-k key 1"), windows[:], cfg.JSON(), []byte(teacherID)} {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// NewTopKCache returns an empty in-memory cache for n windows of t tokens with k entries per
// token, named by hash. Errors: n, t or k < 1, or more than 2³¹ entries.
func NewTopKCache(n, t, k int, hash [32]byte) (*TopKCache, error) {
	if n < 1 || t < 1 || k < 1 || k > 64 {
		return nil, fmt.Errorf("train.NewTopKCache: n=%d t=%d k=%d, want n, t ≥ 1 and 1 ≤ k ≤ 64", n, t, k)
	}
	if float64(n)*float64(t)*float64(k) > MaxTopKEntries {
		return nil, fmt.Errorf("train.NewTopKCache: %d·%d·%d entries is too many (at most 2³¹)", n, t, k)
	}
	rows := n * t
	return &TopKCache{N: n, T: t, K: k, Windows: hash,
		ids: make([]int32, rows*k), probs: make([]float32, rows*k), logps: make([]float32, rows*k),
		lse: make([]float32, rows), have: make([]bool, n)}, nil
}

// Put stores top, the teacher's top-k of windows first … first+top.NB−1. Errors: a shape
// that does not match the cache (T, K) or windows beyond N.
func (c *TopKCache) Put(first int, top *nvgkit.TopK) error {
	if top == nil || top.T != c.T || top.K != c.K {
		return fmt.Errorf("nvgkit.TopKCache.Put: top-k shape does not match the cache (T=%d, K=%d)", c.T, c.K)
	}
	if first < 0 || first+top.NB > c.N {
		return fmt.Errorf("nvgkit.TopKCache.Put: windows %d…%d outside [0, %d)", first, first+top.NB-1, c.N)
	}
	r0, r1 := first*c.T, (first+top.NB)*c.T
	copy(c.ids[r0*c.K:r1*c.K], top.IDs)
	copy(c.probs[r0*c.K:r1*c.K], top.Probs)
	copy(c.logps[r0*c.K:r1*c.K], top.LogProbs)
	copy(c.lse[r0:r1], top.LSE)
	for i := first; i < first+top.NB; i++ {
		c.have[i] = true
	}
	return nil
}

// Complete reports whether every window has been stored (or the cache was loaded).
func (c *TopKCache) Complete() bool {
	for _, h := range c.have {
		if !h {
			return false
		}
	}
	return true
}

// Get returns the top-k of windows first … first+n−1 as a TopK of n windows (fresh
// copies). Errors: a range outside [0, N) or a window not stored yet.
func (c *TopKCache) Get(first, n int) (*nvgkit.TopK, error) {
	if n < 1 || first < 0 || first+n > c.N {
		return nil, fmt.Errorf("nvgkit.TopKCache.Get: windows %d…%d outside [0, %d)", first, first+n-1, c.N)
	}
	for i := first; i < first+n; i++ {
		if !c.have[i] {
			return nil, fmt.Errorf("nvgkit.TopKCache.Get: window %d has not been computed", i)
		}
	}
	r0, r1 := first*c.T, (first+n)*c.T
	k := c.K
	return &nvgkit.TopK{NB: n, T: c.T, K: k,
		IDs:      append([]int32(nil), c.ids[r0*k:r1*k]...),
		Probs:    append([]float32(nil), c.probs[r0*k:r1*k]...),
		LogProbs: append([]float32(nil), c.logps[r0*k:r1*k]...),
		LSE:      append([]float32(nil), c.lse[r0:r1]...)}, nil
}

// FileSize is the exact size in bytes of the cache's file: 80 + 4·N·T·(3K+1).
func (c *TopKCache) FileSize() int64 {
	return topkHeaderSize + 4*int64(c.N)*int64(c.T)*int64(3*c.K+1)
}

// Save writes the cache to path atomically (see TopKCache for the format); on error the
// previous file is untouched. Errors: an incomplete cache, I/O errors naming path.
func (c *TopKCache) Save(path string) error {
	if !c.Complete() {
		return fmt.Errorf("nvgkit.TopKCache.Save %s: not every window has been computed", path)
	}
	crc := crc32.New(castagnoli)
	if err := c.writePayload(crc); err != nil {
		return err
	}
	err := atomicfile.Write(path, func(w io.Writer) error {
		var h [topkHeaderSize]byte
		copy(h[:8], topkMagic)
		binary.LittleEndian.PutUint32(h[8:], topkVersion)
		binary.LittleEndian.PutUint32(h[12:], uint32(c.K))
		binary.LittleEndian.PutUint64(h[16:], uint64(c.N))
		binary.LittleEndian.PutUint64(h[24:], uint64(c.T))
		binary.LittleEndian.PutUint32(h[32:], crc.Sum32())
		copy(h[40:72], c.Windows[:])
		if _, err := w.Write(h[:]); err != nil {
			return err
		}
		return c.writePayload(w)
	})
	if err != nil {
		return fmt.Errorf("nvgkit: %w", err)
	}
	return nil
}

// writePayload writes IDs, Probs, LogProbs and LSE (little-endian) to w.
func (c *TopKCache) writePayload(w io.Writer) error {
	buf := make([]byte, 0, 1<<16)
	put := func(u uint32) error {
		buf = binary.LittleEndian.AppendUint32(buf, u)
		if len(buf) == cap(buf) {
			_, err := w.Write(buf)
			buf = buf[:0]
			return err
		}
		return nil
	}
	for _, v := range c.ids {
		if err := put(uint32(v)); err != nil {
			return err
		}
	}
	for _, arr := range [][]float32{c.probs, c.logps, c.lse} {
		for _, v := range arr {
			if err := put(math.Float32bits(v)); err != nil {
				return err
			}
		}
	}
	_, err := w.Write(buf)
	return err
}

// LoadTopKCache reads a cache written by Save into host memory. It checks, before reading
// the arrays, the magic, version, K in 1…64, N, T ≥ 1 and that the file size is exactly
// FileSize; then the CRC-32C of the payload. Each failure is an error naming path and what
// is wrong (a truncated or corrupt file is never half-used).
func LoadTopKCache(path string) (*TopKCache, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("nvgkit: top-k cache: %w", err)
	}
	defer f.Close()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("nvgkit: top-k cache %s: "+format+" (remove the file to run the teacher pass again)", append([]any{path}, a...)...)
	}
	var h [topkHeaderSize]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return nil, bad("header: %v (not a top-k cache or truncated)", err)
	}
	if string(h[:8]) != topkMagic {
		return nil, bad("bad magic %q, want %q", h[:8], topkMagic)
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != topkVersion {
		return nil, bad("version %d, want %d", v, topkVersion)
	}
	k := int(binary.LittleEndian.Uint32(h[12:]))
	n64, t64 := binary.LittleEndian.Uint64(h[16:]), binary.LittleEndian.Uint64(h[24:])
	if k < 1 || k > 64 || n64 < 1 || t64 < 1 || n64 > math.MaxInt32 || t64 > math.MaxInt32 || float64(n64)*float64(t64)*float64(k) > math.MaxInt32 {
		return nil, bad("bad shape N=%d T=%d K=%d", n64, t64, k)
	}
	var hash [32]byte
	copy(hash[:], h[40:72])
	c, err := NewTopKCache(int(n64), int(t64), k, hash)
	if err != nil {
		return nil, bad("%v", err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, bad("%v", err)
	}
	if st.Size() != c.FileSize() {
		return nil, bad("size %d bytes, want %d for N=%d T=%d K=%d (truncated or corrupt)", st.Size(), c.FileSize(), c.N, c.T, c.K)
	}
	crc := crc32.New(castagnoli)
	r := bufio.NewReaderSize(io.TeeReader(f, crc), 1<<20)
	var b [4]byte
	get := func() (uint32, error) {
		_, err := io.ReadFull(r, b[:])
		return binary.LittleEndian.Uint32(b[:]), err
	}
	for i := range c.ids {
		u, err := get()
		if err != nil {
			return nil, bad("%v", err)
		}
		c.ids[i] = int32(u)
	}
	for _, arr := range [][]float32{c.probs, c.logps, c.lse} {
		for i := range arr {
			u, err := get()
			if err != nil {
				return nil, bad("%v", err)
			}
			arr[i] = math.Float32frombits(u)
		}
	}
	if got, want := crc.Sum32(), binary.LittleEndian.Uint32(h[32:]); got != want {
		return nil, bad("checksum %08x, want %08x (corrupt)", got, want)
	}
	for i := range c.have {
		c.have[i] = true
	}
	return c, nil
}
