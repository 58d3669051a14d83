package testkit_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/nvg-project/nvg/"

// TestLayering keeps the arrows of DESIGN.md §2: no cycles (the compiler's), and these
// rules on the production packages (tests may import what they need):
//   - cmf, compress, gpu, host, arch, wgsl and internal/… never import nvgkit/… or bench;
//   - nvgkit's root, nvgkit/optim, data, tokenizer, session and ui never import nvgkit/train;
//   - only nvgkit/eval (the --host reference paths of nvg eval and nvg trace) and
//     nvgkit/gradcheck import host;
//   - only nvgkit/train imports cmf/tinyteacher (the one place the default model is chosen);
//   - only cmd/nvg imports bench, and nothing imports testkit/….
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	below := []string{"cmf", "compress", "gpu", "host", "arch", "wgsl", "internal/"}
	noTrain := []string{"nvgkit", "nvgkit/optim", "nvgkit/data", "nvgkit/tokenizer", "nvgkit/session", "nvgkit/ui"}
	rules := []struct {
		what   string
		broken func(pkg, imp string) bool
	}{
		{"a package below nvgkit imports nvgkit or bench", func(pkg, imp string) bool {
			return in(pkg, below...) && in(imp, "nvgkit", "bench")
		}},
		{"nvgkit imports nvgkit/train", func(pkg, imp string) bool { return slices.Contains(noTrain, pkg) && in(imp, "nvgkit/train") }},
		{"production code imports host", func(pkg, imp string) bool {
			return imp == "host" && !slices.Contains([]string{"nvgkit/eval", "nvgkit/gradcheck"}, pkg) && !in(pkg, "testkit")
		}},
		{"a package other than nvgkit/train chooses the default model", func(pkg, imp string) bool {
			return imp == "cmf/tinyteacher" && pkg != "nvgkit/train" && !in(pkg, "testkit")
		}},
		{"a package other than cmd/nvg imports bench", func(pkg, imp string) bool { return in(imp, "bench") && pkg != "cmd/nvg" }},
		{"production code imports testkit", func(pkg, imp string) bool { return in(imp, "testkit") && !in(pkg, "testkit") }},
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, ok := strings.CutPrefix(f[0], module)
		if !ok {
			continue
		}
		checked++
		for _, full := range f[1:] {
			imp, ok := strings.CutPrefix(full, module)
			if !ok {
				continue
			}
			for _, r := range rules {
				if r.broken(pkg, imp) {
					t.Errorf("%s: %s imports %s", r.what, pkg, imp)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("go list gave %d packages of the module, want the whole tree", checked)
	}
}

// in reports whether package path p is one of roots or below one of them (a root ending in
// "/" is a folder whose packages are all below it).
func in(p string, roots ...string) bool {
	for _, r := range roots {
		if p == strings.TrimSuffix(r, "/") || strings.HasPrefix(p, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}
