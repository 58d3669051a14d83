// Package readmetest checks that a Go snippet of README.md is the body of a tested example,
// so the README's code compiles and runs as written. Test code only (testkit).
package readmetest

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Check fails t unless the first go code block of section ("## heading") of the markdown
// file readme is, whitespace-normalised, the body of func example in the Go file src (its
// lines between "func example() {" and the first "}" at column 0).
func Check(t testing.TB, readme, section, src, example string) {
	t.Helper()
	md, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	sec := string(md)
	i := strings.Index(sec, "\n"+section+"\n")
	if i < 0 {
		t.Fatalf("%s has no %q section", readme, section)
	}
	sec = sec[i+1:]
	if j := strings.Index(sec[1:], "\n## "); j >= 0 {
		sec = sec[:j+1]
	}
	block := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(sec)
	if block == nil {
		t.Fatalf("%s's %q section has no go code block", readme, section)
	}
	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	open := "func " + example + "() {\n"
	body, ok := strings.CutPrefix(string(code)[max(0, strings.Index(string(code), open)):], open)
	if !ok {
		t.Fatalf("%s has no %s", src, example)
	}
	end := strings.Index(body, "\n}\n")
	if end < 0 {
		t.Fatalf("%s has no closing brace at column 0", example)
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if norm(block[1]) != norm(body[:end]) {
		t.Errorf("%s's snippet differs from the body of %s:\nREADME:\n%s\nexample body:\n%s", readme, example, block[1], body[:end])
	}
}
