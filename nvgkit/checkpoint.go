package nvgkit

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"sort"
)

// CheckpointMeta is the JSON part of a training checkpoint: everything Resume needs besides
// the tensors.
type CheckpointMeta struct {
	// Version of the checkpoint layout (1).
	Version int `json:"version"`
	// Config of the run (Trainer.Config: Windows and CheckpointEvery resolved).
	Config TrainConfig `json:"config"`
	// Step is the number of optimizer steps done; AdamStep the number of Adam updates applied
	// (Step minus skipped steps), the bias-correction step of the next update.
	Step     int `json:"step"`
	AdamStep int `json:"adam_step"`
	// WindowsDrawn is the sampler's position: the number of training windows used so far
	// (Step·NB); the run's windows are drawn from Config.Seed, so they are drawn again the
	// same on resume. WindowsHash is HashWindows of all the run's training windows.
	WindowsDrawn int      `json:"windows_drawn"`
	WindowsHash  [32]byte `json:"windows_hash"`
	// Skipped counts the non-finite steps so far.
	Skipped int `json:"skipped"`
	// Loss and GradNorm are the per-step histories (NaN ↦ null).
	Loss     Losses `json:"loss"`
	GradNorm Losses `json:"grad_norm"`
	// Evals are the held-out evaluations so far; TeacherPPL the teacher's.
	Evals      []EvalPoint `json:"evals"`
	TeacherPPL float64     `json:"teacher_perplexity"`
	// BestStep is the step of the lowest held-out perplexity so far (BestPPL); its snapshot
	// is stored under the "best/" tensors when it differs from the current weights.
	BestStep int     `json:"best_step"`
	BestPPL  float64 `json:"best_perplexity"`
	// WallSeconds and TeacherSeconds accumulate over the resumed parts.
	WallSeconds    float64 `json:"wall_seconds"`
	TeacherSeconds float64 `json:"teacher_seconds"`
	// BitsPerWeight of the student, copied into the report.
	BitsPerWeight float64 `json:"bits_per_weight"`
}

type plainMeta CheckpointMeta

// MarshalJSON writes the metadata with null for a non-finite teacher or best perplexity.
func (m CheckpointMeta) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		plainMeta
		TeacherPPL *float64 `json:"teacher_perplexity"`
		BestPPL    *float64 `json:"best_perplexity"`
	}{plainMeta(m), finitePtr(m.TeacherPPL), finitePtr(m.BestPPL)})
}

// UnmarshalJSON reads metadata written by MarshalJSON (null ↦ NaN).
func (m *CheckpointMeta) UnmarshalJSON(b []byte) error {
	var j struct {
		*plainMeta
		TeacherPPL *float64 `json:"teacher_perplexity"`
		BestPPL    *float64 `json:"best_perplexity"`
	}
	j.plainMeta = (*plainMeta)(m)
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	m.TeacherPPL, m.BestPPL = orNaN(j.TeacherPPL), orNaN(j.BestPPL)
	return nil
}

// Checkpoint is a training checkpoint: its metadata and named float32 tensors (the
// student's trainables and Adam moments from Snapshot, and the best snapshot).
//
// File layout (little-endian), written atomically by Save: magic "NVGCKPT1", u64 length L of
// the JSON header, the JSON header ({"meta": CheckpointMeta, "tensors": [{"name", "len"}…]},
// tensors sorted by name), then each tensor's values as f32 in that order, then a u32
// CRC-32C (Castagnoli) of every byte before it. The file size must be exactly
// 8 + 8 + L + 4·Σlen + 4.
type Checkpoint struct {
	Meta    CheckpointMeta
	Tensors map[string][]float32
}

const ckptMagic = "NVGCKPT1"

type ckptTensor struct {
	Name string `json:"name"`
	Len  int    `json:"len"`
}

type ckptHeader struct {
	Meta    CheckpointMeta `json:"meta"`
	Tensors []ckptTensor   `json:"tensors"`
}

// Save writes c to path atomically: a temporary file in the same directory is written,
// fsynced and renamed over path, so on any error (a full disk, a file size limit, an I/O
// error) the previous checkpoint at path is intact and the temporary file is removed.
// Errors name path and say whether a previous checkpoint was kept.
func (c *Checkpoint) Save(path string) error {
	return c.save(path, nil)
}

// keptNote wraps a failed checkpoint write's error with what is left at path.
func keptNote(path string, err error) error {
	if ok, _ := statFile(path); ok {
		return fmt.Errorf("%w (the previous checkpoint %s was kept intact)", err, path)
	}
	return fmt.Errorf("%w (no checkpoint was written)", err)
}

// save is Save with an optional hook called after the tensors are written (tests make it
// fail to check that the old checkpoint survives).
func (c *Checkpoint) save(path string, hook func() error) error {
	names := make([]string, 0, len(c.Tensors))
	for n := range c.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	h := ckptHeader{Meta: c.Meta}
	for _, n := range names {
		h.Tensors = append(h.Tensors, ckptTensor{Name: n, Len: len(c.Tensors[n])})
	}
	js, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("nvgkit: checkpoint %s: %w", path, err)
	}
	err = writeAtomic(path, func(f *os.File) error {
		crc := crc32.New(castagnoli)
		bw := bufio.NewWriterSize(io.MultiWriter(f, crc), 1<<20)
		w := &errWriter{w: bw}
		w.write([]byte(ckptMagic))
		w.write(binary.LittleEndian.AppendUint64(nil, uint64(len(js))))
		w.write(js)
		buf := make([]byte, 0, 1<<16)
		for _, n := range names {
			for _, v := range c.Tensors[n] {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
				if len(buf) == cap(buf) {
					w.write(buf)
					buf = buf[:0]
				}
			}
		}
		w.write(buf)
		if w.err == nil {
			w.err = bw.Flush()
		}
		if w.err != nil {
			return w.err
		}
		if hook != nil {
			if err := hook(); err != nil {
				return err
			}
		}
		_, err := f.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32()))
		return err
	})
	if err != nil {
		return keptNote(path, err)
	}
	return nil
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) write(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

// LoadCheckpoint reads a checkpoint written by Checkpoint.Save. It checks the magic, the
// header, that the file size is exactly what the header says, and the CRC-32C; each failure
// is an error naming path (a truncated or corrupt checkpoint is never used).
func LoadCheckpoint(path string) (*Checkpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("nvgkit: checkpoint: %w", err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("nvgkit: checkpoint %s: "+format, append([]any{path}, a...)...)
	}
	if len(b) < 20 || string(b[:8]) != ckptMagic {
		return nil, bad("not a checkpoint (bad magic or shorter than 20 bytes)")
	}
	L := binary.LittleEndian.Uint64(b[8:])
	if L > uint64(len(b)-20) {
		return nil, bad("header of %d bytes in a file of %d (truncated)", L, len(b))
	}
	var h ckptHeader
	if err := json.Unmarshal(b[16:16+L], &h); err != nil {
		return nil, bad("header: %v", err)
	}
	total := uint64(16) + L + 4
	for _, t := range h.Tensors {
		if t.Len < 0 || t.Len > len(b) {
			return nil, bad("tensor %s: bad length %d", t.Name, t.Len)
		}
		total += 4 * uint64(t.Len)
	}
	if total != uint64(len(b)) {
		return nil, bad("size %d bytes, want %d (truncated or corrupt)", len(b), total)
	}
	if got, want := crc32.Checksum(b[:len(b)-4], castagnoli), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, bad("checksum %08x, want %08x (corrupt)", got, want)
	}
	c := &Checkpoint{Meta: h.Meta, Tensors: make(map[string][]float32, len(h.Tensors))}
	off := 16 + L
	for _, t := range h.Tensors {
		if _, dup := c.Tensors[t.Name]; dup {
			return nil, bad("tensor %s twice", t.Name)
		}
		v := make([]float32, t.Len)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[off:]))
			off += 4
		}
		c.Tensors[t.Name] = v
	}
	if c.Meta.Version != 1 {
		return nil, bad("version %d, want 1", c.Meta.Version)
	}
	return c, nil
}
