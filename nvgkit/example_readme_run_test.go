package nvgkit_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nvg-project/nvg/gpu/gputest"
	"github.com/nvg-project/nvg/testkit/readmetest"
)

// TestExampleDistillStep runs Example_distillStep (the README's snippet) on the test GPU
// and checks what it prints. It is a test rather than an Output comment so that, like the
// other GPU tests, it skips without an adapter (and fails with NVG_REQUIRE_GPU=1).
func TestExampleDistillStep(t *testing.T) {
	gputest.Open(t)
	out := captureStdout(t, Example_distillStep)
	want := "windows: 2 × 64 tokens\n" +
		"gradients after the first step, every tensor nonzero: true\n" +
		"loss after 5 steps lower than before: true\n"
	if out != want {
		t.Errorf("Example_distillStep printed\n%s\nwant\n%s", out, want)
	}
}

// captureStdout returns what f writes to os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	file, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	saved := os.Stdout
	os.Stdout = file
	defer func() { os.Stdout = saved }()
	f()
	os.Stdout = saved
	b, err := os.ReadFile(file.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadmeSnippetIsExample: the Go block of README.md's "## The step-level API in a Go
// program" section is
// the body of Example_distillStep (whitespace-normalised), so the README's code compiles,
// runs and prints what TestExampleDistillStep checks.
func TestReadmeSnippetIsExample(t *testing.T) {
	readmetest.Check(t, "../README.md", "## The step-level API in a Go program", "example_readme_test.go", "Example_distillStep")
}
