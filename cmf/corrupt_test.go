package cmf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// splitFile returns a safetensors file's header (decoded with json.Number) and data section.
func splitFile(t *testing.T, raw []byte) (map[string]any, []byte) {
	t.Helper()
	hlen := binary.LittleEndian.Uint64(raw)
	dec := json.NewDecoder(bytes.NewReader(raw[8 : 8+hlen]))
	dec.UseNumber()
	var h map[string]any
	if err := dec.Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h, raw[8+hlen:]
}

// rewriteHeader returns raw with its header edited; the data section is kept as is.
func rewriteHeader(t *testing.T, raw []byte, edit func(h map[string]any)) []byte {
	t.Helper()
	h, data := splitFile(t, raw)
	edit(h)
	hb, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hb)))
	return append(append(out, hb...), data...)
}

func entry(h map[string]any, name string) map[string]any { return h[name].(map[string]any) }

// flipInHeader flips bit `bit` of the byte at the offset of the first `what` after the
// header key of tensor `name`, plus `delta` bytes.
func flipInHeader(t *testing.T, raw []byte, name, what string, delta int, bit byte) []byte {
	t.Helper()
	out := append([]byte(nil), raw...)
	hlen := int(binary.LittleEndian.Uint64(raw))
	k := bytes.Index(out[8:8+hlen], []byte(`"`+name+`"`))
	if k < 0 {
		t.Fatalf("%s not in header", name)
	}
	k += 8
	j := bytes.Index(out[k:], []byte(what))
	if j < 0 {
		t.Fatalf("%s not after %s", what, name)
	}
	out[k+j+delta] ^= bit
	return out
}

// lastTensor is the name of the tensor whose data end last in the file.
func lastTensor(t *testing.T, raw []byte) string {
	h, _ := splitFile(t, raw)
	var best string
	var end int64 = -1
	for n, v := range h {
		if n == "__metadata__" {
			continue
		}
		e, _ := v.(map[string]any)["data_offsets"].([]any)[1].(json.Number).Int64()
		if e > end {
			best, end = n, e
		}
	}
	return best
}

// dupEntry returns raw with a second header entry for name appended to the JSON object.
func dupEntry(t *testing.T, raw []byte, name string) []byte {
	t.Helper()
	hlen := binary.LittleEndian.Uint64(raw)
	h := bytes.TrimRight(raw[8:8+hlen], " ")
	h = append(append([]byte(nil), h[:len(h)-1]...), `,"`+name+`":{}}`...)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(out, h...), raw[8+hlen:]...)
}

// TestCorruptTinyTeacher opens corrupted copies of the tiny teacher; each must fail with
// one error naming the file and (where the damage is in a tensor's entry) the tensor.
func TestCorruptTinyTeacher(t *testing.T) {
	orig, err := os.ReadFile(filepath.Join(tinyDir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(tinyDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	last := lastTensor(t, orig)
	const (
		embed = "model.embed_tokens.weight"
		alog  = "model.layers.0.linear_attn.A_log"
		inA   = "model.layers.0.linear_attn.in_proj_a.weight"
		ln0   = "model.layers.0.input_layernorm.weight"
		ln1   = "model.layers.1.input_layernorm.weight"
	)
	cases := []struct {
		name string
		data []byte
		want []string // besides the file path
	}{
		{"truncated data", orig[:len(orig)-1000], []string{"tensor model.", "outside the 17874016-byte data section"}},
		{"truncated header", orig[:5000], []string{"header length 11656 exceeds the file (5000 bytes)"}},
		{"truncated to 3 bytes", orig[:3], []string{"too short"}},
		{"absurd header length", append(binary.LittleEndian.AppendUint64(nil, 1<<62), orig[8:]...), []string{"not a safetensors or .cmf file: its first 8 bytes, read as the little-endian header length a safetensors file starts with, say 4611686018427387904 bytes, beyond the 104857600-byte limit (it starts with the bytes 00 00 00 00 00 00 00 40, or its first 8 bytes are damaged)"}},
		{"header bit flip in dtype", flipInHeader(t, orig, embed, `"BF16"`, 3, 0x02), []string{"tensor " + embed, `unsupported dtype "BF36"`}},
		{"header bit flip in shape", flipInHeader(t, orig, embed, `256]`, 0, 0x01), []string{"tensor " + embed, "shape [8192 356]", "needs 5832704 bytes"}},
		{"header bit flip in structure", flipInHeader(t, orig, embed, `:`, 0, 0x01), []string{"header"}},
		{"trailing bytes", append(append([]byte(nil), orig...), 1, 2, 3), []string{"3 bytes after the last tensor " + last}},
		{"wrong dtype", rewriteHeader(t, orig, func(h map[string]any) { entry(h, alog)["dtype"] = "BF16" }),
			[]string{"tensor " + alog, "shape [2] of BF16 needs 4 bytes", "give 8"}},
		{"shape mismatch", rewriteHeader(t, orig, func(h map[string]any) { entry(h, inA)["shape"] = []int{256, 2} }),
			[]string{"tensor " + inA, "shape [256 2], want [2 256]"}},
		{"overlap", rewriteHeader(t, orig, func(h map[string]any) {
			entry(h, ln1)["data_offsets"] = entry(h, ln0)["data_offsets"]
		}), []string{ln0, ln1, "overlaps"}},
		{"offsets past the end", rewriteHeader(t, orig, func(h map[string]any) {
			o := entry(h, last)["data_offsets"].([]any)
			e, _ := o[1].(json.Number).Int64()
			o[1] = e + 2
		}), []string{"tensor " + last, "outside the"}},
		{"negative offset", rewriteHeader(t, orig, func(h map[string]any) {
			entry(h, embed)["data_offsets"] = []int{-2, 4194302}
		}), []string{"tensor " + embed, "data_offsets [-2, 4194302]"}},
		{"missing entry", rewriteHeader(t, orig, func(h map[string]any) { delete(h, ln0) }), []string{"gap"}},
		{"duplicate entry", dupEntry(t, orig, ln0), []string{`duplicate key "` + ln0 + `"`}},
		{"metadata not strings", rewriteHeader(t, orig, func(h map[string]any) { h["__metadata__"] = map[string]any{"format": 1} }),
			[]string{"__metadata__ is not a map of strings"}},
	}
	for _, tc := range cases {
		dir := t.TempDir()
		path := filepath.Join(dir, "model.safetensors")
		if err := os.WriteFile(path, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Open(dir)
		if err == nil {
			m.Close()
			t.Errorf("%s: opened", tc.name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, path) {
			t.Errorf("%s: error %q does not name the file", tc.name, msg)
		}
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q lacks %q", tc.name, msg, w)
			}
		}
	}
}

// TestCorruptCMF: CMF metadata that disagrees with the entries, or a wrong version.
func TestCorruptCMF(t *testing.T) {
	m := mixedModel(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "good.cmf")
	if err := WriteCMF(path, m); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const blrName = "model.layers.2.mlp.up_proj.weight"
	meta := func(edit func(md map[string]any, ct map[string]any)) []byte {
		return rewriteHeader(t, orig, func(h map[string]any) {
			md := h["__metadata__"].(map[string]any)
			var ct map[string]any
			if err := json.Unmarshal([]byte(md["cmf.tensors"].(string)), &ct); err != nil {
				t.Fatal(err)
			}
			edit(md, ct)
			b, _ := json.Marshal(ct)
			md["cmf.tensors"] = string(b)
		})
	}
	cases := []struct {
		name string
		data []byte
		want []string
	}{
		{"wrong version", meta(func(md, _ map[string]any) { md["cmf"] = "2" }), []string{`unsupported CMF version "2"`}},
		{"no version", meta(func(md, _ map[string]any) { delete(md, "cmf") }), []string{"not a CMF file"}},
		{"no arch", meta(func(md, _ map[string]any) { delete(md, "arch") }), []string{`no "arch"`}},
		{"bad arch", meta(func(md, _ map[string]any) {
			md["arch"] = strings.Replace(md["arch"].(string), `"hidden_size":256`, `"hidden_size":0`, 1)
		}), []string{"arch", "hidden_size must be positive"}},
		{"no cmf.tensors", rewriteHeader(t, orig, func(h map[string]any) { delete(h["__metadata__"].(map[string]any), "cmf.tensors") }),
			[]string{`no "cmf.tensors"`}},
		{"cmf.tensors names a missing tensor", meta(func(_, ct map[string]any) {
			ct["model.layers.9.mlp.up_proj.weight"] = map[string]any{"dtype": "blr", "shape": []int{768, 256}}
		}), []string{"tensor model.layers.9.mlp.up_proj.weight", "not in the file"}},
		{"cmf.tensors on a BF16 entry", meta(func(_, ct map[string]any) {
			ct["model.layers.5.mlp.up_proj.weight"] = map[string]any{"dtype": "blr", "shape": []int{768, 256}}
		}), []string{"tensor model.layers.5.mlp.up_proj.weight", "found BF16 [768 256]"}},
		{"cmf.tensors unknown dtype", meta(func(_, ct map[string]any) {
			ct[blrName] = map[string]any{"dtype": "int4", "shape": []int{768, 256}}
		}), []string{"tensor " + blrName, `dtype "int4"`}},
		{"cmf.tensors wrong logical shape", meta(func(_, ct map[string]any) {
			ct[blrName] = map[string]any{"dtype": "blr", "shape": []int{768, 255}}
		}), []string{"tensor " + blrName, "shape [768 255], want [768 256]"}},
		{"cmf.tensors 3-D shape", meta(func(_, ct map[string]any) {
			ct[blrName] = map[string]any{"dtype": "blr", "shape": []int{768, 256, 1}}
		}), []string{"tensor " + blrName, "want [m, n]"}},
		{"cmf.tensors lacks a U8 entry", meta(func(_, ct map[string]any) { delete(ct, blrName) }),
			[]string{"tensor " + blrName, "shape [1001], want [768 256]"}},
		{"U8 entry shaped 2-D", rewriteHeader(t, orig, func(h map[string]any) { entry(h, blrName)["shape"] = []int{7, 143} }),
			[]string{"tensor " + blrName, "found U8 [7 143]"}},
	}
	for _, tc := range cases {
		p := filepath.Join(t.TempDir(), "m.cmf")
		if err := os.WriteFile(p, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := Open(p)
		if err == nil {
			got.Close()
			t.Errorf("%s: opened", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not name the file", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
}
