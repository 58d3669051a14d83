// Package tinyteacher embeds qwen35-tiny-go, a small trained Qwen3.5-architecture teacher
// (8 layers, hidden 256, vocab 8192, 8.9 M parameters, trained on the Go standard library;
// see ModelCard), so that examples, tests and notebooks have a real model without any
// files. Importing the package links the model (about 18 MB) into the binary; packages
// that do not import it pay nothing.
package tinyteacher

import (
	"embed"
	"io/fs"

	"github.com/nvg-project/nvg/cmf"
)

//go:embed model/*
var files embed.FS

// Open opens the embedded model (HF layout: config.json + model.safetensors, bf16 with the
// GatedDeltaNet A_log and gated norm in f32, tied head) through cmf.OpenFS. Tensor data are
// read from the binary's read-only data on Tensor.Bytes; nothing is copied up front. The
// model is checked with cmf.Model.Validate. Close is harmless but not required.
func Open() (*cmf.Model, error) {
	return cmf.OpenFS(files, "model")
}

// FS returns the embedded model directory as a file system rooted at the model's files
// (config.json, model.safetensors, tokenizer.json, tokenizer_config.json, MODEL_CARD.md,
// training.json).
func FS() fs.FS {
	sub, err := fs.Sub(files, "model")
	if err != nil {
		panic(err) // "model" is a valid path of the embedded tree
	}
	return sub
}

// TokenizerJSON returns the model's HF tokenizer.json (byte-level BPE, 8192 tokens,
// <|endoftext|> = id 0). The slice is a fresh copy.
func TokenizerJSON() []byte {
	return mustRead("model/tokenizer.json")
}

// ModelCard returns MODEL_CARD.md: architecture, training data and held-out quality.
func ModelCard() string {
	return string(mustRead("model/MODEL_CARD.md"))
}

func mustRead(name string) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err) // the file is embedded at build time; a missing one fails the build
	}
	return b
}
