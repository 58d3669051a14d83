package train_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func fakeTopK(nb, t, k int, base int32) *nvgkit.TopK {
	top := &nvgkit.TopK{NB: nb, T: t, K: k}
	for i := 0; i < nb*t*k; i++ {
		top.IDs = append(top.IDs, base+int32(i))
		top.Probs = append(top.Probs, float32(i)/7)
		top.LogProbs = append(top.LogProbs, -float32(i)/3)
	}
	for i := 0; i < nb*t; i++ {
		top.LSE = append(top.LSE, float32(i)+0.5)
	}
	return top
}

func TestTopKCacheRoundTrip(t *testing.T) {
	windows := [][]int{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}
	hash := train.HashWindows(windows)
	if hash == train.HashWindows([][]int{{1, 2, 3}, {4, 5, 6}, {7, 8, 10}}) {
		t.Fatal("different windows, same hash")
	}
	c, err := train.NewTopKCache(3, 3, 2, hash)
	if err != nil {
		t.Fatal(err)
	}
	a, b := fakeTopK(2, 3, 2, 0), fakeTopK(1, 3, 2, 100)
	if err := c.Put(0, a); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(2, 1); err == nil || !strings.Contains(err.Error(), "not been computed") {
		t.Errorf("Get of a missing window: %v", err)
	}
	p := filepath.Join(t.TempDir(), "topk.bin")
	if err := c.Save(p); err == nil {
		t.Error("incomplete cache saved")
	}
	if err := c.Put(2, b); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(2, a); err == nil {
		t.Error("Put beyond N accepted")
	}
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if want := int64(80 + 4*3*3*(3*2+1)); st.Size() != want || c.FileSize() != want {
		t.Errorf("file size %d, FileSize %d, want %d", st.Size(), c.FileSize(), want)
	}
	back, err := train.LoadTopKCache(p)
	if err != nil {
		t.Fatal(err)
	}
	if back.N != 3 || back.T != 3 || back.K != 2 || back.Windows != hash {
		t.Fatalf("header %d %d %d", back.N, back.T, back.K)
	}
	got, err := back.Get(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Errorf("windows 0-1: got %+v, want %+v", got, a)
	}
	got, _ = back.Get(2, 1)
	if !reflect.DeepEqual(got, b) {
		t.Errorf("window 2: got %+v, want %+v", got, b)
	}

	raw, _ := os.ReadFile(p)
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"truncated":  {raw[:len(raw)-4], "truncated or corrupt"},
		"flipped":    {flip(raw, len(raw)-10), "checksum"},
		"magic":      {flip(raw, 0), "bad magic"},
		"shape":      {flip(raw, 16), "size"},
		"short file": {raw[:20], "header"},
	} {
		q := filepath.Join(t.TempDir(), name)
		os.WriteFile(q, tc.data, 0o644)
		if _, err := train.LoadTopKCache(q); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), q) {
			t.Errorf("%s: error %v, want one naming the file and %q", name, err, tc.want)
		}
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x10
	return c
}
