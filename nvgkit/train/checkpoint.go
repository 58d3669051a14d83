package train

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/nvgkit"
)

// CheckpointMeta is the JSON part of a training checkpoint: everything Resume needs besides
// the tensors.
type CheckpointMeta struct {
	// Version of the checkpoint layout (2: safetensors; 1 was the NVGCKPT1 file of earlier
	// versions, no longer read).
	Version int `json:"version"`
	// Config of the run (Trainer.Config: Windows and CheckpointEvery resolved).
	Config TrainConfig `json:"config"`
	// Step is the number of optimizer steps done; AdamStep the number of Adam updates applied
	// (Step minus skipped steps; since the current phase began when a block phase restarted
	// the optimizer: Trainer.endPhase), the bias-correction step of the next update.
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
	// Student, when not nil, names the file holding the compressed student the run started
	// from (Trainer.StudentFile, set by nvg distill): a resume checks it and loads it instead
	// of compressing the teacher again.
	Student *FileDigest `json:"student,omitempty"`
	// Compression, when not nil, is how that student was compressed (Trainer.Compression):
	// a resume whose Setup compresses otherwise is refused.
	Compression *CompressionKey `json:"compression,omitempty"`
	// Setup is the run's settings besides Config — the teacher, tokenizer, student, corpus
	// and compression: Setup's fields but "config", as JSON values by their distill.json
	// names — recorded from Trainer.Setup (Assemble sets it). A resume compares them with its
	// own before any work (a *SettingMismatch names the first that differs). Nil in
	// checkpoints of nvg before issue 34 and of a Trainer made without Assemble.
	Setup map[string]json.RawMessage `json:"setup,omitempty"`
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
// student's trainables and Adam moments from Snapshot under "state/param/", "state/m/" and
// "state/v/", and the best snapshot under "best/…" when it differs from the current weights).
//
// File layout: a safetensors file (readable with the Python safetensors package) whose
// tensors are F32 vectors [len], sorted by name, and whose __metadata__ holds
//
//	"format":     "nvg-checkpoint"
//	"nvg.version": "2"
//	"nvg.meta":   CheckpointMeta as JSON
//	"nvg.crc32":  JSON object: tensor name → CRC-32 (IEEE, as Python's zlib.crc32) of its
//	              little-endian bytes, and "nvg.meta" → that of the nvg.meta string, as
//	              8 lower-case hex digits
//
// Save writes it atomically; LoadCheckpoint checks the safetensors header (cmf's parser),
// the metadata and every CRC.
type Checkpoint struct {
	Meta    CheckpointMeta
	Tensors map[string][]float32
}

const (
	ckptFormat     = "nvg-checkpoint"
	ckptVersion    = 2
	ckptMetaKey    = "nvg.meta"
	ckptCRCKey     = "nvg.crc32"
	ckptOldMagic   = "NVGCKPT1"
	ckptNameFormat = "checkpoint-%06d.safetensors"
)

var ckptNameRE = regexp.MustCompile(`^checkpoint-(\d{6,})\.safetensors$`)

// CheckpointName is the file name of the checkpoint a Trainer writes in
// TrainConfig.OutDir after step steps: "checkpoint-000120.safetensors".
func CheckpointName(step int) string { return fmt.Sprintf(ckptNameFormat, step) }

// CheckpointPaths returns the checkpoint files in dir (names as CheckpointName makes them),
// the latest step first. Errors: dir cannot be read.
func CheckpointPaths(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("nvgkit: checkpoints: %w", err)
	}
	type file struct {
		step int
		path string
	}
	var fs []file
	for _, e := range ents {
		if m := ckptNameRE.FindStringSubmatch(e.Name()); m != nil && !e.IsDir() {
			s, err := strconv.Atoi(m[1])
			if err == nil {
				fs = append(fs, file{s, filepath.Join(dir, e.Name())})
			}
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].step > fs[j].step })
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.path
	}
	return out, nil
}

// checkpointStep is the step in a checkpoint file's name, or −1.
func checkpointStep(path string) int {
	m := ckptNameRE.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return -1
	}
	s, err := strconv.Atoi(m[1])
	if err != nil {
		return -1
	}
	return s
}

// LatestCheckpoint loads the checkpoint of the latest step in dir that is valid (it loads,
// and the step in its name is the step it holds). A newer one that is not valid (truncated
// or corrupt by a crash, a full disk, a bad copy) is passed over: warn, when not nil, is
// called with its error, and the previous one is tried (the oldest one's error is only in
// the returned error). Errors: dir unreadable, no
// checkpoint in dir, or none valid (the error lists every one's).
func LatestCheckpoint(dir string, warn func(error)) (*Checkpoint, string, error) {
	paths, err := CheckpointPaths(dir)
	if err != nil {
		return nil, "", err
	}
	if len(paths) == 0 {
		return nil, "", fmt.Errorf("nvgkit: no checkpoint (checkpoint-NNNNNN.safetensors) in %s", dir)
	}
	var errs []error
	for i, p := range paths {
		ck, err := LoadCheckpoint(p)
		if err == nil && ck.Meta.Step != checkpointStep(p) {
			err = fmt.Errorf("nvgkit: checkpoint %s holds step %d, not the step in its name", p, ck.Meta.Step)
		}
		if err == nil {
			return ck, p, nil
		}
		errs = append(errs, err)
		if warn != nil && i < len(paths)-1 {
			warn(err)
		}
	}
	return nil, "", fmt.Errorf("nvgkit: no valid checkpoint in %s: %w", dir, errors.Join(errs...))
}

// pruneCheckpoints removes the checkpoint files of dir beyond the keep latest of steps ≤
// step, and those of steps after step (left by a trajectory this run replaced: resumed
// from an earlier checkpoint). It returns the removed paths.
func pruneCheckpoints(dir string, step, keep int) ([]string, error) {
	paths, err := CheckpointPaths(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	kept := 0
	for _, p := range paths {
		if s := checkpointStep(p); s <= step && kept < keep {
			kept++
			continue
		}
		if err := os.Remove(p); err != nil {
			return removed, fmt.Errorf("nvgkit: removing an old checkpoint: %w", err)
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// Save writes c to path atomically: a temporary file in the same directory is written,
// fsynced and renamed over path, and the directory is fsynced, so on any error (a full disk,
// a file size limit, an I/O error) the previous checkpoint at path is intact and the
// temporary file is removed. Errors name path and say whether a previous checkpoint was
// kept.
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

// save is Save with an optional hook called after the tensors are written and before the
// file is synced and renamed (tests make it fail to check that the old checkpoint survives).
func (c *Checkpoint) save(path string, hook func() error) error {
	names := make([]string, 0, len(c.Tensors))
	for n := range c.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	mj, err := json.Marshal(c.Meta)
	if err != nil {
		return fmt.Errorf("nvgkit: checkpoint %s: %w", path, err)
	}
	crcs := map[string]string{ckptMetaKey: crcHex(mj)}
	ts := make([]*cmf.Tensor, len(names))
	for i, n := range names {
		v := c.Tensors[n]
		b := make([]byte, 4*len(v))
		for j, x := range v {
			binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
		}
		if ts[i], err = cmf.NewTensor(n, cmf.F32, []int{len(v)}, b); err != nil {
			return fmt.Errorf("nvgkit: checkpoint %s: %w", path, err)
		}
		crcs[n] = crcHex(b)
	}
	cj, err := json.Marshal(crcs)
	if err != nil {
		return fmt.Errorf("nvgkit: checkpoint %s: %w", path, err)
	}
	meta := map[string]string{"format": ckptFormat, "nvg.version": strconv.Itoa(ckptVersion), ckptMetaKey: string(mj), ckptCRCKey: string(cj)}
	err = atomicfile.Write(path, func(w io.Writer) error {
		if err := cmf.EncodeSafetensors(w, ts, meta); err != nil {
			return err
		}
		if hook != nil {
			return hook()
		}
		return nil
	})
	if err != nil {
		return keptNote(path, fmt.Errorf("nvgkit: %w", err))
	}
	return nil
}

func crcHex(b []byte) string { return fmt.Sprintf("%08x", crc32.ChecksumIEEE(b)) }

// LoadCheckpoint reads a checkpoint written by Checkpoint.Save. It checks the safetensors
// header against the file (cmf.OpenSafetensors: a truncated file fails there), the format
// and version, the metadata, that every tensor is an F32 vector with a CRC-32 and that each
// CRC matches; each failure is an error naming path (a truncated or corrupt checkpoint is
// never used). A checkpoint of the older NVGCKPT1 format is refused with an error saying so.
func LoadCheckpoint(path string) (*Checkpoint, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("nvgkit: checkpoint %s: "+format, append([]any{path}, a...)...)
	}
	if f, err := os.Open(path); err == nil {
		magic := make([]byte, len(ckptOldMagic))
		n, _ := io.ReadFull(f, magic)
		f.Close()
		if string(magic[:n]) == ckptOldMagic {
			return nil, bad("an NVGCKPT1 checkpoint of an older nvg; this version reads safetensors checkpoints only (start the run again)")
		}
	}
	sf, err := cmf.OpenSafetensors(path)
	if err != nil {
		return nil, fmt.Errorf("nvgkit: checkpoint: %w", err)
	}
	defer sf.Close()
	if sf.Metadata["format"] != ckptFormat {
		return nil, bad("not an nvg checkpoint (__metadata__ format %q, want %q)", sf.Metadata["format"], ckptFormat)
	}
	if v := sf.Metadata["nvg.version"]; v != strconv.Itoa(ckptVersion) {
		return nil, bad("version %q, want %d", v, ckptVersion)
	}
	var crcs map[string]string
	if err := json.Unmarshal([]byte(sf.Metadata[ckptCRCKey]), &crcs); err != nil {
		return nil, bad("%s: %v (corrupt)", ckptCRCKey, err)
	}
	mj := sf.Metadata[ckptMetaKey]
	if got, want := crcHex([]byte(mj)), crcs[ckptMetaKey]; got != want {
		return nil, bad("%s checksum %s, want %q (corrupt)", ckptMetaKey, got, want)
	}
	c := &Checkpoint{Tensors: make(map[string][]float32, len(sf.Tensors))}
	presetOptimizer(&c.Meta.Config)
	if err := json.Unmarshal([]byte(mj), &c.Meta); err != nil {
		return nil, bad("%s: %v", ckptMetaKey, err)
	}
	if c.Meta.Version != ckptVersion {
		return nil, bad("%s version %d, want %d", ckptMetaKey, c.Meta.Version, ckptVersion)
	}
	if len(crcs) != len(sf.Tensors)+1 {
		return nil, bad("%s lists %d tensors, the file holds %d (corrupt)", ckptCRCKey, len(crcs)-1, len(sf.Tensors))
	}
	for _, t := range sf.Tensors {
		if t.DType != cmf.F32 || len(t.Shape) != 1 {
			return nil, bad("tensor %s: %s %v, want an F32 vector", t.Name, t.DType, t.Shape)
		}
		want, ok := crcs[t.Name]
		if !ok {
			return nil, bad("tensor %s has no checksum in %s (corrupt)", t.Name, ckptCRCKey)
		}
		b, err := t.Bytes()
		if err != nil {
			return nil, fmt.Errorf("nvgkit: checkpoint: %w", err)
		}
		if got := crcHex(b); got != want {
			return nil, bad("tensor %s: checksum %s, want %s (corrupt)", t.Name, got, want)
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		c.Tensors[t.Name] = v
	}
	return c, nil
}

// Extend makes c the checkpoint of a run of steps steps instead of Config.Steps (more steps
// for a finished or unfinished run). The learning-rate schedule keeps the shape it was
// planned with: Config.ScheduleSteps is set to the original Config.Steps (unless already
// set), so the steps already run keep their learning rates and every step after the
// original schedule runs at its floor, MinLRFrac·LR (see TrainConfig.LRAt). The run keeps
// its Config.Windows training windows, cycling through them again (another epoch) when the
// new steps need more, so the teacher's top-k is reused as it is. The steps already run keep
// their phases: a run with a scale-only finish (FinishSteps) that has not reached it yet
// keeps its FinishSteps, so its KL phase grows; one in its finish gets the new steps in the
// finish (FinishSteps grows). Errors: steps not more than Config.Steps, or so many that
// Validate refuses them (c is then unchanged).
func (c *Checkpoint) Extend(steps int) error {
	cfg := &c.Meta.Config
	if steps <= cfg.Steps {
		return fmt.Errorf("nvgkit: the run is planned for %d steps; extending it needs more steps, not %d", cfg.Steps, steps)
	}
	ext := *cfg
	if ext.ScheduleSteps == 0 {
		ext.ScheduleSteps = ext.Steps
	}
	if ext.FinishSteps > 0 && c.Meta.Step > ext.Steps-ext.FinishSteps {
		ext.FinishSteps += steps - ext.Steps
	}
	ext.Steps = steps
	if err := ext.Validate(); err != nil { // a step count whose tokens overflow
		return err
	}
	*cfg = ext
	return nil
}

// CheckStudent checks that c holds every trainable of net, a Student, under "state/" (and
// under "best/" when it has a best snapshot) with the net's lengths (besides the sign state
// of a TrainSigns run, "state/signs/…" and "state/score/…", which Resume checks), before anything is
// restored: a checkpoint of another student (other paths, ranks or architecture) is refused
// with an error naming the first trainable that differs.
func (c *Checkpoint) CheckStudent(net *nvgkit.Net) error {
	if err := net.RequireStudent("Checkpoint.CheckStudent"); err != nil {
		return err
	}
	prefixes := []string{"state/"}
	if hasPrefix(c.Tensors, "best/") {
		prefixes = append(prefixes, "best/")
	}
	want := 0
	for _, prefix := range prefixes {
		for _, tn := range net.Trainables() {
			n, err := net.TrainableLen(tn)
			if err != nil {
				return err
			}
			for _, kind := range []string{"param/", "m/", "v/"} {
				name := prefix + kind + tn
				v, ok := c.Tensors[name]
				if !ok {
					return fmt.Errorf("nvgkit: checkpoint has no %s (a checkpoint of another student?)", name)
				}
				if len(v) != n {
					return fmt.Errorf("nvgkit: checkpoint's %s has %d values, the student's %d (a checkpoint of another student?)", name, len(v), n)
				}
				want++
			}
		}
	}
	want += signTensorCount(c, net) // the sign state of a TrainSigns run, checked by Resume
	if len(c.Tensors) != want {
		return fmt.Errorf("nvgkit: checkpoint holds %d tensors, the student %d (a checkpoint of another student?)", len(c.Tensors), want)
	}
	return nil
}

// FileDigest names a file by its base name, size in bytes and SHA-256 (lower-case hex).
type FileDigest struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// DigestFile returns the FileDigest of path (reading it once). Errors: path unreadable.
func DigestFile(path string) (FileDigest, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileDigest{}, fmt.Errorf("nvgkit: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return FileDigest{}, fmt.Errorf("nvgkit: reading %s: %w", path, err)
	}
	return FileDigest{Name: filepath.Base(path), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Check reports whether the file d.Name in dir is the one d names: an error saying what
// differs (missing, size, content), nil when it matches. The size is compared before the
// file is read.
func (d FileDigest) Check(dir string) error {
	path := filepath.Join(dir, d.Name)
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("nvgkit: %w", err)
	}
	if st.Size() != d.Size {
		return fmt.Errorf("nvgkit: %s has %d bytes, the checkpoint records %d", path, st.Size(), d.Size)
	}
	got, err := DigestFile(path)
	if err != nil {
		return err
	}
	if got.SHA256 != d.SHA256 {
		return fmt.Errorf("nvgkit: %s has SHA-256 %s, the checkpoint records %s", path, got.SHA256, d.SHA256)
	}
	return nil
}
