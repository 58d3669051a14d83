package data

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/nvg-project/nvg/internal/atomicfile"
	"github.com/nvg-project/nvg/nvgkit/tokenizer"
)

// EndOfTextID returns the id of EndOfText ("<|endoftext|>") in tok, or an error when tok
// has no such token.
func EndOfTextID(tok *tokenizer.Tokenizer) (int, error) {
	id, ok := tok.TokenID(EndOfText)
	if !ok {
		return 0, fmt.Errorf("data: the tokenizer has no %s token", EndOfText)
	}
	return id, nil
}

// TokenizeFiles reads the files in order and returns their token stream: each document's
// ids (tok.Encode of its text) followed by the id of EndOfText. A file is one document,
// except a .jsonl file, whose every non-blank line is one: a JSON object whose "text"
// string is the document (other fields are ignored). Documents are encoded in parallel
// (tok.EncodeBatch) in chunks, so memory beyond the result and one file stays bounded. The
// error names the first file that cannot be read, or the file:line of a bad JSONL line.
func TokenizeFiles(tok *tokenizer.Tokenizer, paths []string) ([]int, error) {
	eot, err := EndOfTextID(tok)
	if err != nil {
		return nil, err
	}
	// Reserve room for about 2 bytes per token (Go source averages ~2.8 with the tiny
	// teacher's tokenizer), so the stream is rarely copied while it grows.
	var total int64
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("data: corpus file: %w", err)
		}
		total += st.Size()
	}
	stream := make([]int, 0, total/2+int64(len(paths)))
	chunk := 16 * runtime.GOMAXPROCS(0)
	texts := make([]string, 0, chunk)
	flush := func() {
		for _, ids := range tok.EncodeBatch(texts) {
			stream = append(stream, ids...)
			stream = append(stream, eot)
		}
		texts = texts[:0]
	}
	for _, p := range paths {
		docs, err := readDocuments(p)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			if texts = append(texts, d); len(texts) == chunk {
				flush()
			}
		}
	}
	flush()
	return stream, nil
}

// Tokens returns the token stream of split s of c (TokenizeFiles of c.Paths(s)). When
// cacheDir is not empty the stream is read from, or after tokenizing written to, a file in
// cacheDir named by a hash of the tokenizer (tok.Hash()) and the split's file list (paths,
// sizes, modification times), so a changed file or tokenizer misses the cache. A cache
// file that is unreadable or inconsistent is rebuilt. Writes are atomic (a temporary
// file renamed into place). cacheDir is created if needed.
func (c *Corpus) Tokens(tok *tokenizer.Tokenizer, s Split, cacheDir string) ([]int, error) {
	paths, err := c.Paths(s)
	if err != nil {
		return nil, err
	}
	if cacheDir == "" {
		return TokenizeFiles(tok, paths)
	}
	key, err := cacheKey(tok, paths)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(cacheDir, key+".tok")
	if stream, err := ReadStream(file, tok.VocabSize()); err == nil {
		return stream, nil
	}
	stream, err := TokenizeFiles(tok, paths)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("data: token cache: %w", err)
	}
	if err := WriteStream(file, stream); err != nil {
		return nil, err
	}
	return stream, nil
}

// cacheKey hashes the tokenizer and the file list (path, size, mtime of each file).
func cacheKey(tok *tokenizer.Tokenizer, paths []string) (string, error) {
	h := sha256.New()
	io.WriteString(h, "nvg token stream v1\n"+tok.Hash()+"\n")
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("data: corpus file: %w", err)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("data: corpus file %q: %w", p, err)
		}
		kind := "" // a JSONL file's documents are its lines' texts, not its bytes
		if isJSONL(p) {
			kind = " jsonl"
		}
		io.WriteString(h, strconv.Quote(abs)+" "+strconv.FormatInt(st.Size(), 10)+" "+
			strconv.FormatInt(st.ModTime().UnixNano(), 10)+kind+"\n")
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// streamMagic starts a token stream file.
const streamMagic = "NVGTOK01"

// WriteStream writes a token stream to file atomically (atomicfile.Write: mode 0644, the
// old file intact on error). Format: the 8 bytes "NVGTOK01", the token
// count as u64 little-endian, then each id as u32 little-endian. Ids must be in
// [0, 2^32); the error names the first that is not.
func WriteStream(file string, stream []int) error {
	buf := make([]byte, 16+4*len(stream))
	copy(buf, streamMagic)
	binary.LittleEndian.PutUint64(buf[8:], uint64(len(stream)))
	for i, id := range stream {
		if id < 0 || id > 1<<32-1 {
			return fmt.Errorf("data: stream[%d] = %d is not a token id", i, id)
		}
		binary.LittleEndian.PutUint32(buf[16+4*i:], uint32(id))
	}
	if err := atomicfile.WriteBytes(file, buf); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	return nil
}

// ReadStream reads a file written by WriteStream. It returns an error naming the file when
// it is missing, is not a stream file, its length disagrees with its count, or an id is
// ≥ vocabSize (vocabSize ≤ 0 skips that check).
func ReadStream(file string, vocabSize int) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if len(b) < 16 || string(b[:8]) != streamMagic {
		return nil, fmt.Errorf("data: %s is not a token stream file", file)
	}
	n := binary.LittleEndian.Uint64(b[8:])
	if uint64(len(b)-16) != 4*n {
		return nil, fmt.Errorf("data: %s: header says %d tokens but it holds %d bytes of ids", file, n, len(b)-16)
	}
	stream := make([]int, n)
	for i := range stream {
		id := int(binary.LittleEndian.Uint32(b[16+4*i:]))
		if vocabSize > 0 && id >= vocabSize {
			return nil, fmt.Errorf("data: %s: token %d has id %d ≥ vocab size %d", file, i, id, vocabSize)
		}
		stream[i] = id
	}
	return stream, nil
}
