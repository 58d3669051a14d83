// Package jsontest reads and writes the JSON of tests (config.json files to edit), failing
// the test on an error. It imports only the standard library, so the tests of any package,
// arch and cmf included, can use it.
package jsontest

import (
	"encoding/json"
	"os"
	"testing"
)

// Object returns the JSON object in the file at path as a generic map, to edit.
func Object(t testing.TB, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// Marshal is json.Marshal of v, failing t on an error.
func Marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
