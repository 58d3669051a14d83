package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestClientGenCurrent: nvgkit/session's client_gen.go is what labgen writes from lab.go and
// client.go (run `go generate ./nvgkit/session` after changing the Lab interface).
func TestClientGenCurrent(t *testing.T) {
	dir := filepath.Join("..", "..")
	want, err := generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "client_gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("nvgkit/session/client_gen.go is not what labgen writes: run `go generate ./nvgkit/session`")
	}
}

// TestGenerate: a small Lab interface gives one Client method per method the client does
// not define by hand, with the directives' checks, options refused with a hook, and every
// result but the error sent back.
func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	lab := `package session

type Lab interface {
	// A is a call.
	A(x int, s string) (float64, error)
	//lab:nohook
	B(opts ...Option) error
	//lab:abspath p
	C(p string) ([]byte, int, error)
	D() error
}
`
	client := "package session\n\nfunc (c *Client) D() error { return nil }\n"
	for name, src := range map[string]string{"lab.go": lab, "client.go": client} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"func (c *Client) A(x int, s string) (float64, error) {\n\tvar r0 float64\n\terr := c.call(\"A\", nil, []any{x, s}, &r0)\n\treturn r0, err\n}",
		"func (c *Client) B(opts ...Option) error {\n\tvar err error\n\tif err = c.hookForbids(\"B\"); err != nil {\n\t\treturn err\n\t}\n\to := Apply(opts...)\n\tif o.PreOptimizer != nil {\n\t\treturn errors.New(\"session: B takes no PreOptimizer option\")\n\t}\n\treturn c.call(\"B\", &o, nil)\n}",
		"if p, err = absPath(p); err != nil {\n\t\treturn r0, r1, err\n\t}\n\terr = c.call(\"C\", nil, []any{p}, &r0, &r1)\n\treturn r0, r1, err",
		`import "errors"`,
	} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("generated code lacks\n%s\nin\n%s", want, got)
		}
	}
	if bytes.Contains(got, []byte("func (c *Client) D(")) {
		t.Error("D, defined by hand in client.go, was generated too")
	}
	if err := os.WriteFile(filepath.Join(dir, "lab.go"), []byte("package session\n\ntype Lab interface {\n\tE() int\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := generate(dir); err == nil {
		t.Error("a method without an error result: no error")
	}
}
