package data

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestOpenCorpus: explicit lists are kept as given (either may be nil), and no list at all
// is the Go standard library's split.
func TestOpenCorpus(t *testing.T) {
	f, err := filepath.Abs("open_test.go")
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenCorpus(nil, []string{f})
	if err != nil || c.Train != nil || !slices.Equal(c.HeldOut, []string{f}) || c.Root != "" {
		t.Fatalf("held-out only: %+v, %v", c, err)
	}
	if c, err = OpenCorpus([]string{f}, nil); err != nil || !slices.Equal(c.Train, []string{f}) || c.HeldOut != nil {
		t.Fatalf("training only: %+v, %v", c, err)
	}
	if _, err := OpenCorpus([]string{"no/such.go"}, nil); err == nil {
		t.Error("a missing file was accepted")
	}
	if _, err := GoRoot(); err != nil {
		t.Skipf("no Go tree for the standard library case: %v", err)
	}
	if c, err = OpenCorpus(nil, nil); err != nil || c.Root == "" || len(c.Train) == 0 || len(c.HeldOut) == 0 {
		t.Fatalf("standard library: root %q, %d training and %d held-out files, %v", c.Root, len(c.Train), len(c.HeldOut), err)
	}
}
