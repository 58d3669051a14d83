package version

import (
	"errors"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// The fallback chain: link-time values first, then the build information, then git in the
// compiled-in source directory, else unknown.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	git := func(d string) (string, bool, error) {
		calls++
		if d != dir {
			t.Errorf("git asked about %s, want %s", d, dir)
		}
		return "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00", true, nil
	}
	noGit := func(string) (string, bool, error) { return "", false, errors.New("not a git repository") }
	bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abcdef0123456789abcdef0123456789abcdef01"}, {Key: "vcs.modified", Value: "true"}}}
	bare := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"}}
	for _, tc := range []struct {
		name         string
		ldV, ldC     string
		bi           *debug.BuildInfo
		src          string
		git          func(string) (string, bool, error)
		want         Info
		wantGitCalls int
	}{
		{"ldflags", "v9", "1111111111111111111111111111111111111111", bi, dir, git,
			Info{Version: "v9", Commit: "1111111111111111111111111111111111111111", CommitSource: FromLdflags, GoVersion: "go1.99"}, 0},
		{"buildinfo", "", "", bi, dir, git,
			Info{Version: "(devel)", Commit: "abcdef0123456789abcdef0123456789abcdef01", Modified: true, CommitSource: FromBuildInfo, GoVersion: "go1.99"}, 0},
		{"git", "", "", bare, dir, git,
			Info{Version: "v1.2.3", Commit: "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00", Modified: true, CommitSource: FromGit, GoVersion: "go1.99"}, 1},
		{"no build info, git", "", "", nil, dir, git,
			Info{Version: "(devel)", Commit: "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00", Modified: true, CommitSource: FromGit, GoVersion: runtime.Version()}, 1},
		{"trimpath source", "", "", bare, "github.com/nvg-project/nvg/internal/version", git,
			Info{Version: "v1.2.3", GoVersion: "go1.99"}, 0},
		{"no git", "", "", bare, dir, noGit, Info{Version: "v1.2.3", GoVersion: "go1.99"}, 0},
	} {
		calls = 0
		if got := resolve(tc.ldV, tc.ldC, "", tc.bi, tc.src, tc.git); got != tc.want || calls != tc.wantGitCalls {
			t.Errorf("%s: %+v (git called %d times), want %+v", tc.name, got, calls, tc.want)
		}
	}
	if s := (Info{Version: "(devel)", Commit: "abcdef0123456789", Modified: true, CommitSource: FromGit, GoVersion: "go1.99"}).String(); s != "nvg (devel) (abcdef012345, modified, go1.99; commit from git)" {
		t.Errorf("String: %q", s)
	}
	if s := (Info{Version: "v1", GoVersion: "go1.99"}).String(); s != "nvg v1 (unknown commit, go1.99)" {
		t.Errorf("String, no commit: %q", s)
	}
}

// In this checkout, Get finds the checkout's HEAD (test binaries carry no VCS stamp, so
// through git at run time, or from the build information).
func TestGetInCheckout(t *testing.T) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	head := strings.TrimSpace(string(out))
	i := Get()
	if i.Commit != head || (i.CommitSource != FromGit && i.CommitSource != FromBuildInfo) || i.GoVersion != runtime.Version() {
		t.Errorf("Get() = %+v, want commit %s from git or buildinfo, Go %s", i, head, runtime.Version())
	}
}
