package tinyteacher

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/cmf"
)

func TestEmbeddedMatchesDisk(t *testing.T) {
	emb, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	disk, err := cmf.Open("model")
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	if emb.Config.HiddenSize != 256 || emb.Config.VocabSize != 8192 || !emb.Config.TieWordEmbeddings || len(emb.Tensors) != len(disk.Tensors) {
		t.Fatalf("embedded config %+v, %d tensors", emb.Config, len(emb.Tensors))
	}
	if err := emb.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, n := range disk.Names() {
		a, err := emb.Tensors[n].Bytes()
		if err != nil {
			t.Fatal(err)
		}
		b, err := disk.Tensors[n].Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) || emb.Tensors[n].DType != disk.Tensors[n].DType {
			t.Fatalf("%s differs", n)
		}
	}
	// The embedded A_log of layer 0 is f32 with the file's values.
	v, err := emb.Tensors["model.layers.0.linear_attn.A_log"].Float64()
	if err != nil || len(v) != 2 || emb.Tensors["model.layers.0.linear_attn.A_log"].DType != cmf.F32 {
		t.Fatal(err, v)
	}
}

func TestTokenizerAndCard(t *testing.T) {
	disk, err := os.ReadFile("model/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(TokenizerJSON(), disk) {
		t.Fatal("TokenizerJSON differs from model/tokenizer.json")
	}
	if !strings.Contains(ModelCard(), "qwen35-tiny-go") {
		t.Fatal("model card")
	}
	if _, err := FS().Open("config.json"); err != nil {
		t.Fatal(err)
	}
}
