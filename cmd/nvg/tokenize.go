package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nvg-project/nvg/nvgkit/tokenizer"
	"github.com/nvg-project/nvg/nvgkit/train"
)

func init() {
	register(&command{
		name:    "tokenize",
		summary: "encode text on stdin to token ids (a JSON array on stdout), or decode ids with --decode",
		usage:   "[--tokenizer FILE|MODEL_DIR] [--decode] < input",
		run:     runTokenize,
	})
}

func runTokenize(args []string) error {
	c := commands["tokenize"]
	fs := newFlags(c)
	tokPath := fs.String("tokenizer", "", "tokenizer.json, or a model directory holding one (default: the embedded tiny teacher's)")
	decode := fs.Bool("decode", false, "read a JSON array of ids on stdin and print the decoded text")
	if err := parseFlags(c, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("takes no arguments (text comes on stdin), got %q", fs.Args())
	}
	raw, err := train.TokenizerJSON(*tokPath, "", nil, logf)
	if err != nil {
		return err
	}
	tok, err := tokenizer.FromJSON(raw)
	if errors.Is(err, tokenizer.ErrNotTokenizerJSON) {
		return usagef("--tokenizer %s is not a tokenizer.json (no model.vocab): give a tokenizer.json or the model directory holding one", *tokPath)
	}
	if err != nil {
		return fmt.Errorf("tokenizer %s: %w", cmp.Or(*tokPath, train.DefaultModelName), err)
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	if *decode {
		var ids []int
		if err := json.Unmarshal(in, &ids); err != nil {
			return usagef("--decode wants a JSON array of token ids on stdin: %v", err)
		}
		s, err := tok.Decode(ids)
		if err != nil {
			return err
		}
		_, err = os.Stdout.WriteString(s)
		return err
	}
	ids := tok.Encode(string(in))
	if ids == nil {
		ids = []int{}
	}
	b, _ := json.Marshal(ids)
	fmt.Println(string(b))
	return nil
}
