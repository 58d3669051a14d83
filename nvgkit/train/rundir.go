package train

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/internal/atomicfile"
)

// A run directory (nvg distill -o DIR; TrainConfig.OutDir) holds, besides the checkpoints
// (CheckpointName), metrics.jsonl (MetricsFile), the student and the report:
const (
	// RunFileName is the run's settings (RunFile), which a resume reads.
	RunFileName = "distill.json"
	// CompressedStudentFile is the compressed student the run trains from (Env.RunDir), reused
	// by a resume when the checkpoint's size and SHA-256 match it.
	CompressedStudentFile = "compressed.cmf"
	// CompressionFile is that student's digest and per-tensor compression reports
	// (compressionRecord), for the bits per weight and the reconstruction plot of a resume.
	CompressionFile = "compression.json"
	// TopKFileName is the teacher's top-k (TopKCache) of a run that names no other file.
	TopKFileName = "teacher-topk.bin"
)

// RunFile is a run directory's distill.json: the run's Setup (its JSON layout, which nvg
// distill --config reads too), the seed at the top level (Train.Seed, which also seeds the
// compression), when the run started and the Provenance of the session that started it
// (report.json has the finishing session's).
type RunFile struct {
	Setup
	Seed       uint64      `json:"seed"`
	Started    string      `json:"started"`
	Provenance *Provenance `json:"provenance,omitempty"`
}

// WriteRunFile writes f as dir's distill.json (atomically).
func WriteRunFile(dir string, f RunFile) error {
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(dir, RunFileName), append(b, '\n'))
}

// ReadRunFile reads dir's distill.json (a file written before the optimizer's Adam moments
// were recorded reads back with the defaults it trained with). Errors: no such file (an
// *InputError: not a run directory), malformed JSON.
func ReadRunFile(dir string) (RunFile, error) {
	p := filepath.Join(dir, RunFileName)
	b, err := os.ReadFile(p)
	if err != nil {
		return RunFile{}, inputf("%s: %v (not an nvg distill output directory?)", dir, err)
	}
	var f RunFile
	presetOptimizer(&f.Train)
	if err := json.Unmarshal(b, &f); err != nil {
		return RunFile{}, fmt.Errorf("%s: %w", p, err)
	}
	return f, nil
}

// HasCheckpoint reports whether dir holds a checkpoint file (valid or not).
func HasCheckpoint(dir string) bool {
	ps, err := CheckpointPaths(dir)
	return err == nil && len(ps) > 0
}

// compressionRecord is compression.json: the compressed student's digest and the per-tensor
// compression reports.
type compressionRecord struct {
	Student FileDigest              `json:"student"`
	Reports []compress.TensorReport `json:"reports"`
}

// ResumePoint is what a resume of a run directory checked before any work (LoadResumePoint):
// the checkpoint to continue from, its path, and, when the run's compressed student can be
// reused, its compression reports (nil: Assemble compresses the teacher again).
type ResumePoint struct {
	Checkpoint *Checkpoint
	Path       string
	Reports    []compress.TensorReport
}

// LoadResumePoint finds the latest valid checkpoint in the run directory dir (logging the
// newer ones that are not), checks that it is the run of dir's settings s (the teacher,
// tokenizer, student, corpus and compression it records, and every training setting but
// the output paths, the step counts, the checkpoints kept and the activations kept;
// Checkpoint.Extend changes Steps, ScheduleSteps and FinishSteps), and whether the
// compressed student it records is there unchanged. Nothing is compressed or run on the GPU.
// Errors: no valid checkpoint (each one's error), a setting that differs (a *SettingMismatch
// naming it and the run file).
func LoadResumePoint(dir string, s Setup, logf func(format string, a ...any)) (*ResumePoint, error) {
	logf = orDiscard(logf)
	ck, path, err := LatestCheckpoint(dir, func(e error) { logf("warning: %v; trying the checkpoint before it", e) })
	if err != nil {
		return nil, err
	}
	logf("resuming from %s (step %d of %d)", path, ck.Meta.Step, ck.Meta.Config.Steps)
	free := func(c *TrainConfig) { // what a resume may change (--steps extends the run)
		c.OutDir, c.TopKFile, c.Steps, c.ScheduleSteps, c.FinishSteps, c.Keep, c.KeepActivations, c.ActivationBudget = "", "", 0, 0, 0, 0, false, 0
	}
	if err := compareSettings(path, ck, s, filepath.Join(dir, RunFileName), free); err != nil {
		return nil, err
	}
	res := &ResumePoint{Checkpoint: ck, Path: path}
	if ck.Meta.Student == nil {
		return res, nil
	}
	if err := ck.Meta.Student.Check(dir); err != nil {
		logf("warning: %v; compressing the teacher again", err)
		return res, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, CompressionFile))
	var rec compressionRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err == nil && rec.Student != *ck.Meta.Student {
		err = fmt.Errorf("%s names %s, the checkpoint %s", CompressionFile, rec.Student.SHA256, ck.Meta.Student.SHA256)
	}
	if err != nil {
		logf("warning: %s: %v; compressing the teacher again", filepath.Join(dir, CompressionFile), err)
		return res, nil
	}
	res.Reports = rec.Reports
	return res, nil
}

// saveCompressedStudent writes the compressed student m to dir/compressed.cmf and its reports
// to dir/compression.json (atomically) and returns the student file's digest. When res
// records a student, the new file must be that one (compression is deterministic for the
// run's settings): an error says so otherwise.
func saveCompressedStudent(dir string, m *cmf.Model, reports []compress.TensorReport, res *ResumePoint) (FileDigest, error) {
	path := filepath.Join(dir, CompressedStudentFile)
	if err := cmf.WriteCMF(path, m); err != nil {
		return FileDigest{}, err
	}
	d, err := DigestFile(path)
	if err != nil {
		return d, err
	}
	if res != nil && res.Checkpoint.Meta.Student != nil && *res.Checkpoint.Meta.Student != d {
		want := res.Checkpoint.Meta.Student
		return d, fmt.Errorf("--resume: the teacher compressed again gives %s (%d bytes, SHA-256 %s), not the student the checkpoint was trained from (%d bytes, SHA-256 %s): another teacher or nvg version?",
			path, d.Size, d.SHA256, want.Size, want.SHA256)
	}
	b, err := json.MarshalIndent(compressionRecord{Student: d, Reports: reports}, "", " ")
	if err != nil {
		return d, err
	}
	return d, atomicfile.WriteBytes(filepath.Join(dir, CompressionFile), append(b, '\n'))
}

// orDiscard returns logf, or a function that discards its lines when logf is nil.
func orDiscard(logf func(format string, a ...any)) func(format string, a ...any) {
	if logf == nil {
		return func(string, ...any) {}
	}
	return logf
}
