package nvgkit_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/gpu/gputest"
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
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(readme)
	i := strings.Index(sec, "\n## The step-level API in a Go program\n")
	if i < 0 {
		t.Fatal(`README.md has no "## The step-level API in a Go program" section`)
	}
	sec = sec[i+1:]
	if j := strings.Index(sec[1:], "\n## "); j >= 0 {
		sec = sec[:j+1]
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(sec)
	if m == nil {
		t.Fatal(`README.md's "The step-level API in a Go program" section has no go code block`)
	}
	src, err := os.ReadFile("example_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	start := strings.Index(body, "func Example_distillStep() {\n")
	if start < 0 {
		t.Fatal("example_readme_test.go has no Example_distillStep")
	}
	body = body[start+len("func Example_distillStep() {\n"):]
	end := strings.Index(body, "\n}\n")
	if end < 0 {
		t.Fatal("Example_distillStep has no closing brace at column 0")
	}
	body = body[:end]
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if norm(m[1]) != norm(body) {
		t.Errorf("README.md's snippet differs from the body of Example_distillStep:\nREADME:\n%s\nexample body:\n%s", m[1], body)
	}
}
