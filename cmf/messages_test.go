package cmf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenNotAModel: a file that is not a model (a README, a JSON file, a binary) is
// refused with what it is and what nvg opens, not with a header length read from its text
// (`nvg eval README.md` said "header length 9287021010332033059 exceeds the file").
func TestOpenNotAModel(t *testing.T) {
	dir := t.TempDir()
	forms := "; nvg opens as a model an HF checkpoint directory (config.json with model.safetensors or model.safetensors.index.json), a .cmf file, or a sharded CMF model (its directory or its .cmf.index.json)"
	for _, tc := range []struct {
		name, content, want string
	}{
		// The length the issue quoted for nvg's README; 48 bytes quoted, the cut at a character.
		{"README.md", "# nvg — design notes\n\nnvg distils 1-bit students of Qwen3.5 models.\n",
			`9287021010332033059 bytes, beyond the 104857600-byte limit (it starts with text: "# nvg — design notes\n\nnvg distils 1-bit studen"…)`},
		{"config.json", "{\n  \"hidden_size\": 256\n}\n",
			`%d bytes, beyond the 104857600-byte limit (it starts with text: "{\n  \"hidden_size\": 256\n}\n")`},
		{"weights.bin", "\xff\xfe\x00\x01\x02\x03\x04\x05\x06\x07",
			`%d bytes, beyond the 104857600-byte limit (it starts with the bytes ff fe 00 01 02 03 04 05, or its first 8 bytes are damaged)`},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(p)
		if strings.Contains(tc.want, "%d") {
			tc.want = fmt.Sprintf(tc.want, binary.LittleEndian.Uint64([]byte(tc.content)))
		}
		want := p + ": not a safetensors or .cmf file: its first 8 bytes, read as the little-endian header length a safetensors file starts with, say " + tc.want + forms
		if err == nil || err.Error() != want || !errors.Is(err, ErrNotSafetensors) {
			t.Errorf("Open(%s):\n got %v\nwant %s", tc.name, err, want)
		}
	}
}

// TestConfigMessagesNameTheFileOnce: an HF directory's config.json errors name the file once
// (it said "config.json: config.json: hidden_size is missing"), and a key given twice is
// refused with its place.
func TestConfigMessagesNameTheFileOnce(t *testing.T) {
	orig, err := os.ReadFile("tinyteacher/model/config.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(orig, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "hidden_size")
	missing, _ := json.Marshal(m)
	dup := bytes.Replace(orig, []byte("{"), []byte(`{"hidden_size": 512,`), 1)
	for _, tc := range []struct {
		what string
		cfg  []byte
		want string
	}{
		{"missing", missing, "hidden_size is missing"},
		{"duplicate", dup, `duplicate key "hidden_size" at the top level (a JSON object names it twice; nvg refuses rather than take one of the values)`},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, HFConfigName), tc.cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir)
		if want := filepath.Join(dir, HFConfigName) + ": " + tc.want; err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", tc.what, err, want)
		}
	}
}

// TestDuplicateKeysInHeadersAndIndexes: the one rule for JSON holds below the top level of
// a safetensors header (a tensor entry naming its dtype twice) and of a shard index (a
// tensor mapped to two shards).
func TestDuplicateKeysInHeadersAndIndexes(t *testing.T) {
	header := `{"t":{"dtype":"F32","shape":[1],"dtype":"F16","data_offsets":[0,4]}}`
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	file = append(append(file, header...), 0, 0, 0, 0)
	_, _, err := ParseSafetensorsHeader(bytes.NewReader(file), int64(len(file)), "x.safetensors")
	if err == nil || !strings.HasPrefix(err.Error(), `x.safetensors: header: duplicate key "dtype" in t (`) {
		t.Errorf("a tensor entry with two dtypes: %v", err)
	}
	_, err = ParseShardIndex([]byte(`{"metadata":{},"weight_map":{"a.weight":"s1.safetensors","a.weight":"s2.safetensors"}}`))
	if err == nil || !strings.HasPrefix(err.Error(), `index: duplicate key "a.weight" in weight_map (`) {
		t.Errorf("an index mapping a tensor twice: %v", err)
	}
}
