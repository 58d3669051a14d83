package train_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/nvgkit"
	"github.com/nvg-project/nvg/nvgkit/train"
)

// fakeHidden returns hidden states of nb windows whose values encode (layer, window, index).
func fakeHidden(nb, t, h int, layers []int, first int) *nvgkit.HiddenStates {
	hs := &nvgkit.HiddenStates{NB: nb, T: t, H: h, Layers: layers}
	for i := range layers {
		p := make([]uint16, nb*t*h)
		for j := range p {
			p[j] = uint16(i*10000 + (first+j/(t*h))*100 + j%(t*h))
		}
		hs.F16 = append(hs.F16, p)
	}
	return hs
}

// TestHiddenCache: a memory cache and a file cache filled with the same windows give the
// same states back for any range (windows split across Put calls and records); the file has
// exactly HiddenCacheSize bytes and reopens with its shape and key; a missing window, a range
// outside the cache, states of another shape, windows out of order, a failing fill (which
// leaves no file), a flipped byte (the record's CRC), a truncated file and a bad magic are
// refused with errors naming what is wrong.
func TestHiddenCache(t *testing.T) {
	const n, T, H = 5, 3, 4
	layers := []int{1, 3}
	key := [32]byte{7}
	mem, err := train.NewHiddenCache(n, T, H, layers, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Get(0, 1); err == nil || !strings.Contains(err.Error(), "window 0 has not been computed") {
		t.Errorf("Get before Put: %v", err)
	}
	groups := [][2]int{{0, 2}, {2, 2}, {4, 1}}
	for _, g := range groups {
		if err := mem.Put(g[0], fakeHidden(g[1], T, H, layers, g[0])); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "teacher-topk.bin.hidden")
	file, err := train.WriteHiddenCache(path, n, T, H, layers, key, func(put func(int, *nvgkit.HiddenStates) error) error {
		for _, g := range groups {
			if err := put(g[0], fakeHidden(g[1], T, H, layers, g[0])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if st, err := os.Stat(path); err != nil || st.Size() != train.HiddenCacheSize(n, T, H, len(layers)) {
		t.Fatalf("file %v (%v), want %d bytes", st, err, train.HiddenCacheSize(n, T, H, len(layers)))
	}
	for _, r := range [][2]int{{0, 5}, {1, 3}, {4, 1}} {
		want := fakeHidden(r[1], T, H, layers, r[0])
		for name, c := range map[string]*train.HiddenCache{"memory": mem, "file": file} {
			got, err := c.Get(r[0], r[1])
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s Get(%d, %d) = %+v, %v; want %+v", name, r[0], r[1], got, err, want)
			}
		}
	}
	re, err := train.OpenHiddenCache(path)
	if err != nil {
		t.Fatal(err)
	}
	if re.N != n || re.T != T || re.H != H || !reflect.DeepEqual(re.Layers, layers) || re.Key != key {
		t.Errorf("reopened %d×%d×%d layers %v key %x", re.N, re.T, re.H, re.Layers, re.Key[:2])
	}
	re.Close()

	if _, err := mem.Get(3, 3); err == nil || !strings.Contains(err.Error(), "outside [0, 5)") {
		t.Errorf("range: %v", err)
	}
	if err := mem.Put(0, fakeHidden(1, T, H, []int{1}, 0)); err == nil || !strings.Contains(err.Error(), "do not match") {
		t.Errorf("other layers: %v", err)
	}
	if err := file.Put(0, fakeHidden(1, T, H, layers, 0)); err == nil || !strings.Contains(err.Error(), "is a file") {
		t.Errorf("Put into a file cache: %v", err)
	}
	other := filepath.Join(t.TempDir(), "h")
	_, err = train.WriteHiddenCache(other, n, T, H, layers, key, func(put func(int, *nvgkit.HiddenStates) error) error {
		return put(2, fakeHidden(1, T, H, layers, 2))
	})
	if err == nil || !strings.Contains(err.Error(), "windows from 2 given, the file is at window 0") {
		t.Errorf("out of order: %v", err)
	}
	boom := errors.New("teacher pass failed")
	if _, err := train.WriteHiddenCache(other, n, T, H, layers, key, func(func(int, *nvgkit.HiddenStates) error) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("failing fill: %v", err)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("a failed write left %s: %v", other, err)
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		data []byte
		get  bool
		want string
	}{
		{"crc", flip(b, len(b)-10), true, "window 4: checksum"},
		{"truncated", b[:len(b)-1], false, "truncated or corrupt"},
		{"magic", flip(b, 0), false, "bad magic"},
	} {
		p := filepath.Join(t.TempDir(), c.name)
		if err := os.WriteFile(p, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		hc, err := train.OpenHiddenCache(p)
		if c.get && err == nil {
			_, err = hc.Get(0, n)
			hc.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want an error naming the file and %q", c.name, err, c.want)
		}
	}
}

// TestWriteHiddenCacheNoSpace: a cache larger than the free space of its file system is
// refused before the teacher pass (fill) runs, naming the size and the way out, and leaves
// no file.
func TestWriteHiddenCacheNoSpace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "topk.bin.hidden")
	called := false
	// 2³⁰ windows × 512 tokens × hidden 1024 × 2 bytes: 1 PiB, more than any test machine's disk.
	_, err := train.WriteHiddenCache(path, 1<<30, 512, 1024, []int{3}, [32]byte{}, func(func(int, *nvgkit.HiddenStates) error) error {
		called = true
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "free") || !strings.Contains(err.Error(), "--hidden-loss none") {
		t.Fatalf("WriteHiddenCache of 1 PiB: %v; want the free-space refusal", err)
	}
	if called {
		t.Error("fill ran before the refusal")
	}
	if _, serr := os.Stat(path); !os.IsNotExist(serr) {
		t.Errorf("the refused cache left %s (stat: %v)", path, serr)
	}
}
