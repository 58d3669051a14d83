package tinytest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestPoisoned: the copy differs from the tiny teacher's file on disk in exactly the bytes of
// the element asked for, at the offset the header gives (read here independently), and its
// config.json is the teacher's.
func TestPoisoned(t *testing.T) {
	const dir = "../../cmf/tinyteacher/model"
	orig, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(orig)
	var h map[string]struct {
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(orig[8:8+hlen], &h); err != nil {
		t.Fatal(err)
	}
	const name = "model.layers.0.linear_attn.A_log" // F32
	p := Poisoned(t, name, 1, []byte{1, 2, 3, 4})
	got, err := os.ReadFile(p)
	if err != nil || len(got) != len(orig) {
		t.Fatalf("copy: %d bytes (%v), want %d", len(got), err, len(orig))
	}
	at := int(8 + int64(hlen) + h[name].DataOffsets[0] + 4)
	for i := range got {
		if want := orig[i]; i >= at && i < at+4 {
			want = byte(i - at + 1)
			if got[i] != want {
				t.Fatalf("byte %d = %d, want %d", i, got[i], want)
			}
		} else if got[i] != want {
			t.Fatalf("byte %d changed (the element is at %d)", i, at)
		}
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if c, err := os.ReadFile(filepath.Join(filepath.Dir(p), "config.json")); err != nil || !bytes.Equal(c, cfg) {
		t.Fatalf("config.json of the copy differs (%v)", err)
	}
}
