package tokenizer

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// benchText returns about 1 MB of real Go source: the non-test files of $GOROOT/src/net/http
// when the Go tree is present, else the fixture texts repeated.
func benchText(b *testing.B) string {
	b.Helper()
	var sb strings.Builder
	if root := runtime.GOROOT(); root != "" {
		files, _ := filepath.Glob(filepath.Join(root, "src", "net", "http", "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			data, err := os.ReadFile(f)
			if err == nil {
				sb.Write(data)
			}
		}
	}
	if sb.Len() == 0 {
		for sb.Len() < 1<<20 {
			for _, c := range loadCases(b, "tokenizer-cases-tiny-go.json") {
				sb.WriteString(c.Text)
			}
		}
	}
	return sb.String()
}

func benchEncode(b *testing.B, path string, cold bool) {
	tok := loadTok(b, path)
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		if cold {
			tok.cache = wordCache{}
		}
		tok.Encode(text)
	}
}

// BenchmarkEncode measures single-threaded Encode throughput (MB/s) on Go source with the
// word cache warm, the steady state when tokenizing a corpus.
func BenchmarkEncode(b *testing.B) { benchEncode(b, tinyPath, false) }

// BenchmarkEncodeCold is BenchmarkEncode with the word cache emptied before every pass.
func BenchmarkEncodeCold(b *testing.B) { benchEncode(b, tinyPath, true) }

// BenchmarkEncodeQwen3 is BenchmarkEncode with the 151k-token Qwen3 tokenizer.
func BenchmarkEncodeQwen3(b *testing.B) { benchEncode(b, qwen3Path, false) }

// BenchmarkEncodeRegexp2 measures the same text through the general regexp2 splitter
// (what a tokenizer whose pattern is not Qwen2Pattern gets).
func BenchmarkEncodeRegexp2(b *testing.B) {
	tok := *loadTok(b, tinyPath)
	re, err := newRegexSplitter(Qwen2Pattern)
	if err != nil {
		b.Fatal(err)
	}
	tok.splits = []splitter{re}
	tok.cache = wordCache{}
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}

// BenchmarkEncodeBatch measures EncodeBatch over the files of the benchmark text, split into
// 64 parts, on GOMAXPROCS goroutines.
func BenchmarkEncodeBatch(b *testing.B) {
	tok := loadTok(b, tinyPath)
	text := benchText(b)
	var parts []string
	step := len(text)/64 + 1
	for i := 0; i < len(text); i += step {
		parts = append(parts, text[i:min(i+step, len(text))])
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.EncodeBatch(parts)
	}
}
