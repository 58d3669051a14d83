// Package jsondup finds the keys a JSON document names twice in one object. encoding/json
// takes the last of them silently; nvg's readers of user files (config.json, safetensors and
// CMF headers, shard indexes) refuse such a file instead, because which value a file means
// is then a guess (docs/RELIABILITY.md, "One rule for JSON").
package jsondup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Check returns an error naming the first key that appears twice in one object of the JSON
// document data, and where: `duplicate key "hidden_size" in text_config` (a dotted path of
// keys and [i] indexes, "at the top level" for the outermost object). It returns nil for a
// document without duplicates, and json's syntax error for one that does not parse (the
// caller's decoder reports it as usual). It allocates no more than the nesting depth and the
// keys of the open objects.
func Check(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		path   string
		object bool
		keys   map[string]bool
		key    bool // an object expects a key next
		index  int  // an array's next element
	}
	var stack []*frame
	// valueDone moves the innermost frame past a value.
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		if f := stack[len(stack)-1]; f.object {
			f.key = true
		} else {
			f.index++
		}
	}
	lastKey := "" // the key of the value that comes next in an object
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
				valueDone()
				continue
			}
			k, _ := tok.(string)
			if top.keys[k] {
				where := "at the top level"
				if top.path != "" {
					where = "in " + top.path
				}
				return fmt.Errorf("duplicate key %s %s (a JSON object names it twice; nvg refuses rather than take one of the values)", strconv.Quote(k), where)
			}
			top.keys[k] = true
			top.key = false
			lastKey = k
			continue
		}
		path := ""
		switch {
		case top != nil && top.object:
			path = join(top.path, lastKey)
		case top != nil:
			path = fmt.Sprintf("%s[%d]", top.path, top.index)
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{path: path, object: true, keys: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{path: path})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
