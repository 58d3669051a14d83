package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/compress"
	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// Files of an nvg distill output directory besides the checkpoints, the student and the
// report: the compressed student the run starts from (reused by --resume when the
// checkpoint's size and SHA-256 match), its compression reports, and the teacher's top-k.
const (
	compressedStudentFile = "compressed.cmf"
	compressionFile       = "compression.json"
	distillTopKFile       = "teacher-topk.bin"
)

// compressionRecord is compression.json: the compressed student's digest and the per-tensor
// compression reports (for the bits per weight and the reconstruction plot of a resumed run).
type compressionRecord struct {
	Student train.FileDigest        `json:"student"`
	Reports []compress.TensorReport `json:"reports"`
}

// resumePoint is what --resume checked before any work: the checkpoint to continue from and,
// when the run's compressed student can be reused, its compression reports (nil: compress
// again).
type resumePoint struct {
	ck      *train.Checkpoint
	path    string
	reports []compress.TensorReport
}

// hasCheckpoint reports whether dir holds a checkpoint file (valid or not).
func hasCheckpoint(dir string) bool {
	ps, err := train.CheckpointPaths(dir)
	return err == nil && len(ps) > 0
}

// loadResumePoint finds the latest valid checkpoint in out (warning about newer ones that
// are not), checks that it is the run distill.json describes (every setting but the paths,
// the step count and Keep), and whether the compressed student it records is there
// unchanged. Nothing is compressed or run on the GPU. Errors: no valid checkpoint (each
// one's error), settings that differ (naming the run's file).
func loadResumePoint(out string, s distillSettings) (*resumePoint, error) {
	ck, path, err := train.LatestCheckpoint(out, func(e error) {
		fmt.Fprintf(os.Stderr, "warning: %v; trying the checkpoint before it\n", e)
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "resuming from %s (step %d of %d)\n", path, ck.Meta.Step, ck.Meta.Config.Steps)
	norm := func(c train.TrainConfig) train.TrainConfig {
		c = c.Resolved()
		c.OutDir, c.TopKFile, c.Steps, c.ScheduleSteps, c.Keep, c.KeepActivations, c.ActivationBudget = "", "", 0, 0, 0, false, 0
		return c
	}
	if a, b := norm(ck.Meta.Config), norm(s.Config); !reflect.DeepEqual(a, b) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		return nil, fmt.Errorf("--resume %s: the checkpoint's settings %s differ from %s's %s (a checkpoint of another run?)", path, ja, distillSettingsFile, jb)
	}
	res := &resumePoint{ck: ck, path: path}
	if ck.Meta.Student == nil {
		return res, nil
	}
	if err := ck.Meta.Student.Check(out); err != nil {
		fmt.Fprintf(os.Stderr, "warning: %v; compressing the teacher again\n", err)
		return res, nil
	}
	b, err := os.ReadFile(filepath.Join(out, compressionFile))
	var rec compressionRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err == nil && rec.Student != *ck.Meta.Student {
		err = fmt.Errorf("%s names %s, the checkpoint %s", compressionFile, rec.Student.SHA256, ck.Meta.Student.SHA256)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "warning: %s: %v; compressing the teacher again\n", filepath.Join(out, compressionFile), err)
		return res, nil
	}
	res.reports = rec.Reports
	return res, nil
}

// saveCompressedStudent writes the compressed student m to out/compressed.cmf and its
// reports to out/compression.json (atomically) and returns the student file's digest. For
// a resumed run (res not nil) whose checkpoint records a student, the new file must be that
// one (compression is deterministic for the run's settings): an error says so otherwise.
func saveCompressedStudent(out string, m *cmf.Model, reports []compress.TensorReport, res *resumePoint) (train.FileDigest, error) {
	path := filepath.Join(out, compressedStudentFile)
	if err := cmf.WriteCMF(path, m); err != nil {
		return train.FileDigest{}, err
	}
	d, err := train.DigestFile(path)
	if err != nil {
		return d, err
	}
	if res != nil && res.ck.Meta.Student != nil && *res.ck.Meta.Student != d {
		return d, fmt.Errorf("--resume: the teacher compressed again gives %s (%d bytes, SHA-256 %s), not the student the checkpoint was trained from (%d bytes, SHA-256 %s): another teacher or nvg version?",
			path, d.Size, d.SHA256, res.ck.Meta.Student.Size, res.ck.Meta.Student.SHA256)
	}
	b, err := json.MarshalIndent(compressionRecord{Student: d, Reports: reports}, "", " ")
	if err != nil {
		return d, err
	}
	return d, atomicfile.WriteBytes(filepath.Join(out, compressionFile), append(b, '\n'))
}
