package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// TextExtensions are the file name extensions (lower case) ExpandSources takes from a
// directory: source code, prose and JSONL corpora. Files named explicitly or matched by a
// pattern are taken whatever their extension.
var TextExtensions = []string{".c", ".cc", ".cpp", ".go", ".h", ".hpp", ".java", ".js", ".jsonl", ".md", ".py", ".rs", ".rst", ".sh", ".ts", ".txt"}

// ExpandSources turns corpus sources into a list of files, in order, without duplicates
// (the first occurrence of a cleaned path is kept). Each source is one of:
//   - a file: taken as it is (a .jsonl file is a JSONL corpus, see TokenizeFiles; any other
//     file is one plain-text document);
//   - a directory: every regular file under it, recursively, whose extension (any case) is in
//     TextExtensions, in lexical order, skipping directories whose name starts with "."
//     below it (.git and the like);
//   - a pattern with *, ? or [ (filepath.Glob; no "**"): its matches in lexical order, a
//     matched directory expanded as above.
//
// Empty sources are skipped. Errors name the source: a file or directory that does not
// exist, a path that is neither a regular file nor a directory, a malformed pattern, a
// pattern that matches nothing, a directory that holds no text file, or no source at all.
func ExpandSources(sources []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if c := filepath.Clean(p); !seen[c] {
			seen[c] = true
			out = append(out, p)
		}
	}
	n := 0
	for _, src := range sources {
		if src == "" {
			continue
		}
		n++
		paths := []string{src}
		if strings.ContainsAny(src, "*?[") {
			m, err := filepath.Glob(src)
			if err != nil {
				return nil, fmt.Errorf("data: pattern %q: %w", src, err)
			}
			if len(m) == 0 {
				return nil, fmt.Errorf("data: pattern %q matches no file", src)
			}
			paths = m
		}
		for _, p := range paths {
			st, err := os.Stat(p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("data: %s: no such file or directory", p)
			}
			if err != nil {
				return nil, fmt.Errorf("data: %w", err)
			}
			switch {
			case st.IsDir():
				files, err := textFilesUnder(p)
				if err != nil {
					return nil, err
				}
				for _, f := range files {
					add(f)
				}
			case st.Mode().IsRegular():
				add(p)
			default:
				return nil, fmt.Errorf("data: %s is not a regular file or a directory", p)
			}
		}
	}
	if n == 0 {
		return nil, errors.New("data: no corpus files given")
	}
	return out, nil
}

// textFilesUnder lists the regular files under dir with an extension in TextExtensions.
func textFilesUnder(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && slices.Contains(TextExtensions, strings.ToLower(filepath.Ext(p))) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("data: listing %s: %w", dir, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("data: directory %s holds no file with a text extension (%s)", dir, strings.Join(TextExtensions, " "))
	}
	return out, nil
}

// isJSONL reports whether path names a JSONL corpus (extension .jsonl, any case).
func isJSONL(path string) bool { return strings.EqualFold(filepath.Ext(path), ".jsonl") }

// readDocuments returns the documents of one corpus file: its whole contents, or for a
// .jsonl file the "text" string of every non-blank line (one JSON object per line, as
// Hugging Face datasets export; other fields are ignored). A line that is not valid JSON,
// not an object, or has no "text" string is an error naming file:line; so is a file holding
// a NUL byte (a binary file).
func readDocuments(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("data: corpus file: %w", err)
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		// A NUL byte is in no text file (and no Go source): a binary file named or matched
		// by a pattern would otherwise be tokenized as noise.
		return nil, fmt.Errorf("data: %s: a NUL byte at offset %d: a binary file, not text (a directory source takes text extensions only)", path, i)
	}
	if !isJSONL(path) {
		return []string{string(b)}, nil
	}
	var docs []string
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				err = fmt.Errorf("%s is a JSON %s", map[bool]string{true: "the line", false: `"text"`}[te.Field == ""], te.Value)
			}
			return nil, fmt.Errorf("data: %s:%d: want a JSON object with a \"text\" string: %v", path, i+1, err)
		}
		if rec.Text == nil {
			return nil, fmt.Errorf("data: %s:%d: no \"text\" string", path, i+1)
		}
		docs = append(docs, *rec.Text)
	}
	return docs, nil
}
