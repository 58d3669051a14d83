// Package version tells which nvg build is running: its version, the git commit it was built
// from (and whether the checkout had changes) and the Go version, for nvg --version and the
// provenance of run reports.
package version

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// Set at link time, for builds that carry no VCS information (a release script, a build
// outside the checkout):
//
//	go build -ldflags "-X github.com/nvg-project/nvg/internal/version.commit=$(git rev-parse HEAD) \
//	  -X github.com/nvg-project/nvg/internal/version.modified=false \
//	  -X github.com/nvg-project/nvg/internal/version.version=v0.3.0" ./cmd/nvg
var commit, modified, version string

// Sources of Info.Commit.
const (
	FromLdflags   = "ldflags"   // -ldflags -X …version.commit
	FromBuildInfo = "buildinfo" // runtime/debug build information (vcs.revision), as go build stamps it in a checkout
	FromGit       = "git"       // git rev-parse HEAD at run time in the source directory compiled in (-buildvcs=false builds), trusted only while that checkout is unchanged since the executable was written
)

// Info describes the running build.
type Info struct {
	// Version is the module version ("v1.2.3" for go install …@v1.2.3, the ldflags value),
	// "(devel)" for a build in a checkout.
	Version string `json:"version"`
	// Commit is the full git commit hash, "" when unknown; Modified is true when the
	// checkout had uncommitted changes to tracked files.
	Commit   string `json:"commit"`
	Modified bool   `json:"modified"`
	// CommitSource says where Commit came from: FromLdflags, FromBuildInfo or FromGit ("" when
	// unknown). FromGit reads the source directory when the process runs, which may have
	// moved on since the build.
	CommitSource string `json:"commit_source"`
	// GoVersion is the Go toolchain that built the binary (runtime.Version()).
	GoVersion string `json:"go_version"`
}

// String is "nvg VERSION (COMMIT[, modified], GO_VERSION; commit from SOURCE)", the commit
// shortened to 12 hex digits ("unknown commit" when unknown).
func (i Info) String() string {
	c := i.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if c == "" {
		return fmt.Sprintf("nvg %s (unknown commit, %s)", i.Version, i.GoVersion)
	}
	if i.Modified {
		c += ", modified"
	}
	return fmt.Sprintf("nvg %s (%s, %s; commit from %s)", i.Version, c, i.GoVersion, i.CommitSource)
}

var (
	once sync.Once
	info Info
)

// Get returns the running build's Info: the commit from the link-time variable when set,
// else from the build information Go embeds (vcs.revision, vcs.modified), else from git in
// the source directory whose path was compiled in (runtime.Caller) when that directory
// still exists and git is installed. Computed once.
func Get() Info {
	once.Do(func() {
		bi, _ := debug.ReadBuildInfo()
		_, file, _, _ := runtime.Caller(0)
		info = resolve(version, commit, modified, bi, filepath.Dir(file), gitHead)
	})
	return info
}

// resolve is Get's fallback chain with its inputs given: the link-time values, the build
// information (nil when none), the compiled-in source directory and the git lookup.
func resolve(ldVersion, ldCommit, ldModified string, bi *debug.BuildInfo, srcDir string, git func(dir string) (string, bool, error)) Info {
	i := Info{Version: "(devel)", GoVersion: runtime.Version()}
	if bi != nil {
		if bi.Main.Version != "" {
			i.Version = bi.Main.Version
		}
		i.GoVersion = bi.GoVersion
	}
	if ldVersion != "" {
		i.Version = ldVersion
	}
	if ldCommit != "" {
		i.Commit, i.Modified, i.CommitSource = ldCommit, ldModified == "true", FromLdflags
		return i
	}
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Commit = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
		if i.Commit != "" {
			i.CommitSource = FromBuildInfo
			return i
		}
		i.Modified = false
	}
	if st, err := os.Stat(srcDir); err == nil && st.IsDir() && filepath.IsAbs(srcDir) {
		if c, dirty, err := git(srcDir); err == nil && c != "" {
			i.Commit, i.Modified, i.CommitSource = c, dirty, FromGit
		}
	}
	return i
}

// gitHead returns HEAD's commit in the git checkout holding dir and whether tracked files
// differ from it. Read at run time, that is the build's commit only while the checkout has
// not changed since the executable was written (as with go run, which builds and runs at
// once): when HEAD moved after it (git's HEAD log is newer than the executable) or a
// modified tracked file is newer, the answer would name another tree, so it is an error
// and the commit stays unknown.
func gitHead(dir string) (string, bool, error) {
	built, err := executableTime()
	if err != nil {
		return "", false, err
	}
	return gitHeadAt(dir, built)
}

// gitHeadAt is gitHead for an executable written at built.
func gitHeadAt(dir string, built time.Time) (string, bool, error) {
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false, err
	}
	c := strings.TrimSpace(string(out))
	st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return "", false, err
	}
	newer := func(path string) bool {
		fi, err := os.Stat(path)
		return err == nil && fi.ModTime().After(built)
	}
	if out, err := exec.Command("git", "-C", dir, "rev-parse", "--path-format=absolute", "--git-path", "logs/HEAD").Output(); err == nil && newer(strings.TrimSpace(string(out))) {
		return "", false, fmt.Errorf("version: HEAD of %s moved after this executable was built", dir)
	}
	top, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", false, err
	}
	for _, line := range strings.Split(strings.TrimRight(string(st), "\n"), "\n") {
		if len(line) > 3 && newer(filepath.Join(strings.TrimSpace(string(top)), line[3:])) {
			return "", false, fmt.Errorf("version: %s changed after this executable was built", line[3:])
		}
	}
	return c, len(strings.TrimSpace(string(st))) > 0, nil
}

// executableTime is when the running executable was written.
func executableTime() (time.Time, error) {
	exe, err := os.Executable()
	if err != nil {
		return time.Time{}, err
	}
	fi, err := os.Stat(exe)
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}
