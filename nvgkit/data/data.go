// Package data builds the token streams a distillation run trains and evaluates on: the
// default corpus (the Go standard library source, split as the tiny teacher's model card
// says), or user-given file lists (ExpandSources turns files, directories, globs and JSONL
// corpora into one; each list is one split as given — the crc32 held-out rule splits only
// the default corpus); tokenizes them into one stream per split with each document (a file,
// or a line of a .jsonl file) followed by <|endoftext|>; caches streams on disk; and cuts streams into
// windows, sequentially (Windows) or by a seeded, machine-independent sampler (Sampler).
//
// Windows ignore document boundaries: a window may span the <|endoftext|> between two
// documents, and the nets run their GatedDeltaNet state, causal conv and attention across it
// (nothing is reset or masked at <|endoftext|>; only each window starts from zero state).
// This matches how the tiny teacher was trained (documents joined with <|endoftext|>, random
// windows; its MODEL_CARD.md), so the student is distilled on text as the teacher saw it.
package data

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Split parameters of the default corpus (cmf/tinyteacher/model/MODEL_CARD.md).
const (
	// MaxFileSize is the largest source file, in bytes, the default corpus includes
	// (files over 256 KiB are left out).
	MaxFileSize = 256 << 10
	// HeldOutModulus: a file is held out when crc32.ChecksumIEEE(relpath) % HeldOutModulus == 0.
	HeldOutModulus = 20
	// EndOfText is the document separator token appended after every file.
	EndOfText = "<|endoftext|>"
)

// Corpus is a set of documents (files) split into training and held-out parts. Paths are
// slash-separated and relative to Root when Root is not empty, else as given (absolute or
// relative to the working directory). Both lists are in a fixed order (sorted for listed
// trees, as given for explicit lists), which fixes the order of the token streams.
type Corpus struct {
	Root    string
	Train   []string
	HeldOut []string
}

// GoRoot returns the root of the Go installation: runtime.GOROOT() when it names an
// existing directory (it is empty in binaries built with -trimpath), else the output of
// `go env GOROOT`. It returns an error when neither gives a directory.
func GoRoot() (string, error) {
	if r := runtime.GOROOT(); r != "" {
		if st, err := os.Stat(r); err == nil && st.IsDir() {
			return r, nil
		}
	}
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("data: runtime.GOROOT() is empty and `go env GOROOT` failed: %w", err)
	}
	r := strings.TrimSpace(string(out))
	if st, err := os.Stat(r); err != nil || !st.IsDir() {
		return "", fmt.Errorf("data: `go env GOROOT` gave %q, which is not a directory", r)
	}
	return r, nil
}

// IsHeldOut reports whether the file at relpath (slash-separated, relative to the corpus
// root, e.g. "net/http/server.go") belongs to the held-out split:
// crc32.ChecksumIEEE(relpath) % 20 == 0.
func IsHeldOut(relpath string) bool {
	return crc32.ChecksumIEEE([]byte(relpath))%HeldOutModulus == 0
}

// StdlibCorpus returns the default corpus: the Go standard library source under
// GoRoot()/src, listed and split by ListGoTree. For Go 1.26.8 it has 6140 training and 312
// held-out files.
func StdlibCorpus() (*Corpus, error) {
	root, err := GoRoot()
	if err != nil {
		return nil, err
	}
	return ListGoTree(filepath.Join(root, "src"))
}

// ListGoTree lists every regular `.go` file under dir, skipping directories named
// `testdata` (at any depth) and files larger than MaxFileSize bytes, and splits them with
// IsHeldOut on their slash-separated path relative to dir. Both lists are sorted. It returns
// an error if dir cannot be walked or holds no such file.
func ListGoTree(dir string) (*Corpus, error) {
	c := &Corpus{Root: dir}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" && p != dir {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".go") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > MaxFileSize {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if IsHeldOut(rel) {
			c.HeldOut = append(c.HeldOut, rel)
		} else {
			c.Train = append(c.Train, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("data: listing %s: %w", dir, err)
	}
	if len(c.Train)+len(c.HeldOut) == 0 {
		return nil, fmt.Errorf("data: %s holds no .go file", dir)
	}
	sort.Strings(c.Train)
	sort.Strings(c.HeldOut)
	return c, nil
}

// FilesCorpus returns a corpus of explicit file lists (paths absolute or relative to the
// working directory; Root is empty), kept in the given order: every document of train is
// training text, every one of heldOut held out (no IsHeldOut split; a .jsonl file's lines
// all go to the list it is in). Every file must exist and be
// a regular file: otherwise the error names the first one that is not. Either list may be
// empty (an evaluation needs only held-out files), not both.
func FilesCorpus(train, heldOut []string) (*Corpus, error) {
	if len(train)+len(heldOut) == 0 {
		return nil, errors.New("data: no corpus files given")
	}
	for _, list := range [][]string{train, heldOut} {
		for _, p := range list {
			st, err := os.Stat(p)
			if err != nil {
				return nil, fmt.Errorf("data: corpus file %q: %w", p, err)
			}
			if !st.Mode().IsRegular() {
				return nil, fmt.Errorf("data: corpus file %q is not a regular file", p)
			}
		}
	}
	return &Corpus{Train: append([]string(nil), train...), HeldOut: append([]string(nil), heldOut...)}, nil
}

// OpenCorpus is the corpus of a command's file lists: both nil is the Go standard library
// (StdlibCorpus), anything else FilesCorpus(train, heldOut) (for example held-out files only,
// for an evaluation, or training files only, for a calibration pass). Errors: theirs.
func OpenCorpus(train, heldOut []string) (*Corpus, error) {
	if train == nil && heldOut == nil {
		return StdlibCorpus()
	}
	return FilesCorpus(train, heldOut)
}

// Paths returns the file-system paths of the files of one split (Train or HeldOut).
func (c *Corpus) Paths(s Split) ([]string, error) {
	var rel []string
	switch s {
	case Train:
		rel = c.Train
	case HeldOut:
		rel = c.HeldOut
	default:
		return nil, fmt.Errorf("data: unknown split %d", s)
	}
	out := make([]string, len(rel))
	for i, r := range rel {
		if c.Root == "" {
			out[i] = r
		} else {
			out[i] = filepath.Join(c.Root, filepath.FromSlash(path.Clean(r)))
		}
	}
	return out, nil
}

// Split names one part of a Corpus.
type Split int

// The two splits of a corpus.
const (
	Train   Split = iota // the training files
	HeldOut              // the held-out (evaluation) files
)

// String returns "train" or "heldout".
func (s Split) String() string {
	switch s {
	case Train:
		return "train"
	case HeldOut:
		return "heldout"
	}
	return fmt.Sprintf("Split(%d)", int(s))
}
