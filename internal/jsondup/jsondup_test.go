package jsondup

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestCheck: duplicates are found at every depth and named with their path; documents
// without duplicates pass, whatever they hold (the same key in sibling objects, scalars,
// empty containers); syntax errors are json's.
func TestCheck(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`{"a":1,"b":2,"a":3}`, `duplicate key "a" at the top level`},
		{`{"text_config":{"hidden_size":8,"x":[1,2],"hidden_size":16}}`, `duplicate key "hidden_size" in text_config`},
		{`{"a":{"b":{"c":1,"c":2}}}`, `duplicate key "c" in a.b`},
		{`{"l":[{"x":1},{"y":1,"y":2}]}`, `duplicate key "y" in l[1]`},
		{`[[0],{"k":{},"k":[]}]`, `duplicate key "k" in [1]`},
		{`{"w":{"t.weight":"s1","t.weight":"s2"}}`, `duplicate key "t.weight" in w`},
		{`{"a":1,"b":{"a":1},"c":[{"a":1},{"a":2}],"d":{},"e":[],"f":null}`, ""},
		{`{"a":"x","A":"y","a ":"z"}`, ""},
		{`"just a string"`, ""},
	} {
		err := Check([]byte(tc.doc))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", tc.doc, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q…", tc.doc, err, tc.want)
		}
	}
	var syn *json.SyntaxError
	if err := Check([]byte(`{"a":1,,}`)); !errors.As(err, &syn) {
		t.Errorf("broken JSON: %v, want json's syntax error", err)
	}
}
