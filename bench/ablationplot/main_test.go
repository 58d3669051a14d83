package main

import (
	"bytes"
	"compress/gzip"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvg-project/nvg/nvgkit/ui"
)

// TestStepLosses: step records by step number, their KL where recorded apart from the
// hidden-state term, block-wise and skipped steps as NaN, other records ignored; the moving average skips the NaN and restarts after them.
func TestStepLosses(t *testing.T) {
	dir := t.TempDir()
	lines := `{"kind":"eval","step":0,"loss":9}
{"kind":"step","step":1,"phase":"block","loss":0.5}
{"kind":"step","step":2,"phase":"kl","loss":3}
{"kind":"step","step":3,"phase":"kl","loss":1,"skipped":true}
{"kind":"step","step":4,"phase":"finish","loss":2.75,"kl":2,"hidden_loss":0.75}
`
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := stepLosses(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 4 || !math.IsNaN(l[0]) || l[1] != 3 || !math.IsNaN(l[2]) || l[3] != 2 {
		t.Fatalf("losses %v, want [NaN 3 NaN 2]", l)
	}
	avg := ui.MovingAverage(l, 3)
	if !math.IsNaN(avg[0]) || avg[1] != 3 || !math.IsNaN(avg[2]) || avg[3] != 2.5 {
		t.Errorf("moving average %v, want [NaN 3 NaN 2.5]", avg)
	}
	out := filepath.Join(dir, "a.png")
	if err := run(out, "t", []string{"a=" + dir, "b=" + dir}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("%s: %v, %d bytes, want a PNG", out, err, len(b))
	}
	gz := t.TempDir() // the same records gzipped, as docs/bench keeps them
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte(lines))
	zw.Close()
	if err := os.WriteFile(filepath.Join(gz, "metrics.jsonl.gz"), zb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if lz, err := stepLosses(gz); err != nil || len(lz) != 4 || lz[1] != 3 || lz[3] != 2 {
		t.Errorf("gzipped: %v, %v; want [NaN 3 NaN 2]", lz, err)
	}
	if err := run(out, "t", []string{"nodir"}); err == nil {
		t.Error("an argument without NAME= was accepted")
	}
}
