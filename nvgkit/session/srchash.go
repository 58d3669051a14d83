package session

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
)

// buildInputs is what `go build ./cmd/nvg` reads, as `go list -deps` lists it.
type buildInputs struct {
	files []string // paths relative to the module root, sorted: sources, embedded files, go.mod, go.sum
	dirs  []string // the directories of the packages hashed by file (a new file there may join a package)
	mods  []string // "path@version" of every other dependency, sorted
}

// listBuildInputs asks the Go toolchain what builds cmd/nvg in the module at root: the
// source, cgo and assembly files and the embedded files of every package of the main module
// (or of a module replaced by a local directory) that cmd/nvg links, and the module path and
// version of every other dependency. Standard-library packages are left to the Go version.
func listBuildInputs(root string) (buildInputs, error) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,Standard,Module,GoFiles,CgoFiles,CFiles,CXXFiles,HFiles,SFiles,SysoFiles,EmbedFiles", "./cmd/nvg")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return buildInputs{}, fmt.Errorf("go list -deps ./cmd/nvg: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var in buildInputs
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			Dir      string
			Standard bool
			Module   *struct {
				Path, Version string
				Main          bool
				Replace       *struct{ Path, Version string }
			}
			GoFiles, CgoFiles, CFiles, CXXFiles, HFiles, SFiles, SysoFiles, EmbedFiles []string
		}
		if err := dec.Decode(&p); err != nil {
			return buildInputs{}, fmt.Errorf("go list -deps ./cmd/nvg: %w", err)
		}
		m := p.Module
		switch {
		case p.Standard:
			continue
		case m != nil && !m.Main && (m.Replace == nil || m.Replace.Version != ""):
			mod := m.Path + "@" + m.Version
			if m.Replace != nil {
				mod += " => " + m.Replace.Path + "@" + m.Replace.Version
			}
			in.mods = append(in.mods, mod)
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			return buildInputs{}, err
		}
		in.dirs = append(in.dirs, rel)
		for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.CFiles, p.CXXFiles, p.HFiles, p.SFiles, p.SysoFiles, p.EmbedFiles} {
			for _, f := range list {
				in.files = append(in.files, filepath.Join(rel, f))
			}
		}
	}
	in.files = append(in.files, "go.mod")
	if _, err := os.Stat(filepath.Join(root, "go.sum")); err == nil { // absent without dependencies
		in.files = append(in.files, "go.sum")
	}
	for _, l := range []*[]string{&in.files, &in.dirs, &in.mods} {
		sort.Strings(*l)
		*l = slices.Compact(*l)
	}
	return in, nil
}

// sourceHash hashes what `go build ./cmd/nvg` reads (listBuildInputs): the contents of the
// files, the other modules' versions, the Go version and architecture. Checkpoints under
// out/, test files, notebooks, documents and untracked files no package uses do not change
// it. It returns 16 hex digits.
func sourceHash(root string) (string, error) {
	in, err := listBuildInputs(root)
	if err != nil {
		return "", err
	}
	return hashInputs(root, in)
}

func hashInputs(root string, in buildInputs) (string, error) {
	h := sha256.New()
	for _, rel := range in.files {
		fd, err := os.Open(filepath.Join(root, rel))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00", rel)
		_, err = io.Copy(h, fd)
		fd.Close()
		if err != nil {
			return "", err
		}
	}
	for _, m := range in.mods {
		fmt.Fprintf(h, "module %s\x00", m)
	}
	fmt.Fprintf(h, "%s/%s", runtime.Version(), runtime.GOARCH)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// hashCache is the record cachedSourceHash keeps: the hash of a module root and the size
// and modification time of every input file and package directory when it was taken.
type hashCache struct {
	Root, Go, Hash string
	Stamps         map[string]string // path relative to Root → "size mtime-ns" ("dir mtime-ns" for a directory)
}

// stamps returns the stamp of every file and directory of in ("" for one that is missing).
func stamps(root string, in buildInputs) map[string]string {
	out := map[string]string{}
	for _, rel := range append(append([]string(nil), in.files...), in.dirs...) {
		out[rel] = stamp(filepath.Join(root, rel))
	}
	return out
}

func stamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	if fi.IsDir() {
		return fmt.Sprintf("dir %d", fi.ModTime().UnixNano())
	}
	return fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
}

// cachedSourceHash is sourceHash, remembered in the file cache: when no input file and no
// package directory changed size or modification time since it was taken (a stat each, a
// few ms), the recorded hash is returned without asking the Go toolchain (~0.3 s) or reading
// the files (the embedded tiny teacher is 17 MB). Anything else — a missing or unreadable
// cache, another root or Go version, a changed stamp — computes it again and rewrites the
// cache (stamps taken before the files are read, so an edit during the hash is seen next
// time). A cache that cannot be written is not an error.
func cachedSourceHash(root, cache string) (string, error) {
	if b, err := os.ReadFile(cache); err == nil {
		var c hashCache
		if json.Unmarshal(b, &c) == nil && c.Root == root && c.Go == runtime.Version() && len(c.Stamps) > 0 && fresh(root, c.Stamps) {
			return c.Hash, nil
		}
	}
	in, err := listBuildInputs(root)
	if err != nil {
		return "", err
	}
	st := stamps(root, in)
	hash, err := hashInputs(root, in)
	if err != nil {
		return "", err
	}
	if b, err := json.Marshal(hashCache{Root: root, Go: runtime.Version(), Hash: hash, Stamps: st}); err == nil {
		tmp := fmt.Sprintf("%s.%d.tmp", cache, os.Getpid())
		if os.WriteFile(tmp, b, 0o600) == nil && os.Rename(tmp, cache) != nil {
			os.Remove(tmp)
		}
	}
	return hash, nil
}

// fresh reports whether every recorded stamp is still the file's or directory's.
func fresh(root string, st map[string]string) bool {
	for rel, want := range st {
		if want == "" || stamp(filepath.Join(root, rel)) != want {
			return false
		}
	}
	return true
}
