// Package tokenizer implements HuggingFace tokenizer.json byte-level BPE tokenizers (the
// GPT-2 / Qwen2 / Qwen3 / Qwen3.5 family) in pure Go: NFC normalization, added/special
// tokens matched before splitting, the Split pre-tokenizer regex (Qwen2Pattern with its
// (?!\S) look-ahead, or any other pattern through regexp2), the ByteLevel bytes↔unicode
// mapping, BPE merges by rank, and the ByteLevel decoder.
//
// Encode reproduces HF tokenizers' `encode(text, add_special_tokens=False)` ids exactly for
// the supported configurations; FromJSON rejects other configurations with an error naming
// the unsupported part. Ids are int, in [0, VocabSize()).
package tokenizer

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/nvg-project/nvg/internal/jsondup"
	"golang.org/x/text/unicode/norm"
)

// Tokenizer is a loaded byte-level BPE tokenizer. It is immutable after loading except for
// an internal word cache, and safe for concurrent use by multiple goroutines.
type Tokenizer struct {
	vocabSize int
	idBytes   [][]byte         // id → the bytes it decodes to; nil for ids without a token
	hasID     []bool           // id → whether a token has this id
	vocab     map[string]int32 // model vocabulary (byte-level spelling) → id
	added     map[string]int32 // added-token content → id
	special   map[int32]bool   // ids of added tokens marked special

	rawAdded  *addedMatcher // added tokens with normalized=false, matched on the raw text
	normAdded *addedMatcher // added tokens with normalized=true, matched on normalized text

	norms        []normForm
	splits       []splitter
	merges       mergeTable
	byteID       [256]int32 // id of the single-byte token of each byte
	ignoreMerges bool

	cache  wordCache
	hash   string
	maxIDs int // while loading: the bound on ids (number of listed tokens plus slack)
}

// Load reads a HuggingFace tokenizer.json file, gzip-compressed when its name ends in
// ".gz" (large vocabularies compress about 4×). Errors name the file and, for
// configurations this package does not implement, the unsupported component.
func Load(path string) (*Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
		}
	}
	t, err := FromJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ErrNotTokenizerJSON is wrapped by FromJSON's error for a JSON file that is not a
// tokenizer.json (it has no model.vocab).
var ErrNotTokenizerJSON = errors.New("not a tokenizer.json")

// FromJSON parses the contents of a HuggingFace tokenizer.json. Supported: model BPE
// (merges as "a b" strings or ["a","b"] pairs; no dropout, byte_fallback,
// continuing_subword_prefix or end_of_word_suffix; ignore_merges honoured), normalizer
// null/NFC/NFD/NFKC/NFKD/Sequence, pre_tokenizer ByteLevel alone or last in a Sequence of
// Split (Isolated, not inverted) pre-tokenizers, decoder ByteLevel, post_processor
// null/ByteLevel/TemplateProcessing (not applied: Encode adds no special tokens), added
// tokens without lstrip/rstrip/single_word. Anything else is an error naming it.
//
// A key named twice in any object of the file (a vocabulary entry with two ids, two
// "model" sections) is an error naming it and where (internal/jsondup). Valid JSON that is
// not a tokenizer.json at all (no "model" object with a "vocab", e.g. a
// model's config.json) gives an error wrapping ErrNotTokenizerJSON.
func FromJSON(data []byte) (*Tokenizer, error) {
	// One rule for JSON (docs/RELIABILITY.md): a key named twice in an object — a vocabulary
	// entry given two ids — is refused, not resolved by taking the last.
	if err := jsondup.Check(data); err != nil {
		var syn *json.SyntaxError
		if !errors.As(err, &syn) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: not a tokenizer.json: %w", err)
	}
	var mv struct {
		Vocab json.RawMessage `json:"vocab"`
	}
	if isNull(f.Model) || json.Unmarshal(f.Model, &mv) != nil || isNull(mv.Vocab) {
		return nil, fmt.Errorf("tokenizer: %w (no model.vocab)", ErrNotTokenizerJSON)
	}
	t := &Tokenizer{}
	sum := sha256.Sum256(data)
	t.hash = hex.EncodeToString(sum[:])
	// Ids index dense tables: an id beyond the number of tokens the file lists would make
	// those tables (and the memory they take) larger than the file warrants.
	t.maxIDs = len(f.AddedTokens) + 256
	var err error
	if t.norms, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.splits, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := checkPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := t.loadModel(f.Model); err != nil {
		return nil, err
	}
	if err := t.loadAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokenizer) loadModel(raw json.RawMessage) error {
	var mt typed
	if err := json.Unmarshal(raw, &mt); err != nil {
		return fmt.Errorf("tokenizer: model: %w", err)
	}
	if mt.Type != "BPE" && mt.Type != "" { // files of tokenizers < 0.10 omit the BPE type
		return fmt.Errorf("tokenizer: model type %q not supported (only BPE)", mt.Type)
	}
	var m modelJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("tokenizer: BPE model: %w", err)
	}
	switch {
	case m.Merges == nil:
		return fmt.Errorf("tokenizer: BPE model has no merges")
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("tokenizer: BPE dropout %g not supported", *m.Dropout)
	case m.ByteFallback:
		return fmt.Errorf("tokenizer: BPE byte_fallback not supported")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("tokenizer: BPE continuing_subword_prefix %q not supported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("tokenizer: BPE end_of_word_suffix %q not supported", *m.EndOfWordSuffix)
	case len(m.Vocab) == 0:
		return fmt.Errorf("tokenizer: BPE model has an empty vocab")
	}
	t.ignoreMerges = m.IgnoreMerges
	t.maxIDs += len(m.Vocab)
	t.vocab = make(map[string]int32, len(m.Vocab))
	maxID := -1
	for tok, id := range m.Vocab {
		if id < 0 || id >= t.maxIDs {
			return fmt.Errorf("tokenizer: vocab token %q has id %d out of range [0, %d) (ids must be about dense: at most the number of vocab and added tokens)", tok, id, t.maxIDs)
		}
		t.vocab[tok] = int32(id)
		maxID = max(maxID, id)
	}
	t.grow(maxID + 1)
	for tok, id := range m.Vocab {
		if t.hasID[id] {
			return fmt.Errorf("tokenizer: vocab id %d is given to two tokens (one is %q)", id, tok)
		}
		t.hasID[id] = true
		t.idBytes[id] = tokenBytes(tok)
	}
	for b := 0; b < 256; b++ {
		s := string(byteToRune[b])
		id, ok := t.vocab[s]
		if !ok {
			return fmt.Errorf("tokenizer: byte-level vocab lacks the token %q for byte 0x%02x", s, b)
		}
		t.byteID[b] = id
	}
	t.merges = make(mergeTable, len(m.Merges))
	for i, raw := range m.Merges {
		a, b, err := parseMerge(raw, i)
		if err != nil {
			return err
		}
		ia, ok1 := t.vocab[a]
		ib, ok2 := t.vocab[b]
		ic, ok3 := t.vocab[a+b]
		switch {
		case !ok1:
			return fmt.Errorf("tokenizer: merges[%d] (%q %q): %q is not in the vocab", i, a, b, a)
		case !ok2:
			return fmt.Errorf("tokenizer: merges[%d] (%q %q): %q is not in the vocab", i, a, b, b)
		case !ok3:
			return fmt.Errorf("tokenizer: merges[%d] (%q %q): the merged token %q is not in the vocab", i, a, b, a+b)
		}
		// A repeated pair keeps its last rank, as HF's map collection does.
		t.merges[pairKey(ia, ib)] = uint64(i)<<32 | uint64(uint32(ic))
	}
	return nil
}

// grow extends the id tables to hold ids below n.
func (t *Tokenizer) grow(n int) {
	if n <= t.vocabSize {
		return
	}
	t.idBytes = append(t.idBytes, make([][]byte, n-t.vocabSize)...)
	t.hasID = append(t.hasID, make([]bool, n-t.vocabSize)...)
	t.vocabSize = n
}

func (t *Tokenizer) loadAdded(list []addedTokenJSON) error {
	t.added = make(map[string]int32, len(list))
	t.special = make(map[int32]bool)
	var raw, normd []addedEntry
	for i, a := range list {
		switch {
		case a.ID == nil:
			return fmt.Errorf("tokenizer: added_tokens[%d] (%q) has no id", i, a.Content)
		case *a.ID < 0 || *a.ID >= max(t.maxIDs, t.vocabSize):
			return fmt.Errorf("tokenizer: added_tokens[%d] (%q) has id %d out of range [0, %d) (ids must be about dense: at most the number of vocab and added tokens)", i, a.Content, *a.ID, max(t.maxIDs, t.vocabSize))
		case a.Content == "":
			return fmt.Errorf("tokenizer: added_tokens[%d] (id %d) has empty content", i, *a.ID)
		case a.LStrip || a.RStrip || a.SingleWord:
			return fmt.Errorf("tokenizer: added token %q: lstrip/rstrip/single_word not supported", a.Content)
		}
		id := int32(*a.ID)
		t.grow(int(id) + 1)
		if t.hasID[id] {
			if v, ok := t.vocab[a.Content]; !ok || v != id {
				return fmt.Errorf("tokenizer: added token %q has id %d, which the vocab gives to another token", a.Content, id)
			}
		}
		t.hasID[id] = true
		t.idBytes[id] = tokenBytes(a.Content)
		t.added[a.Content] = id
		if a.Special {
			t.special[id] = true
		}
		if a.Normalized {
			normd = append(normd, addedEntry{s: t.normalize(a.Content), id: id})
		} else {
			raw = append(raw, addedEntry{s: a.Content, id: id})
		}
	}
	t.rawAdded = newAddedMatcher(raw)
	t.normAdded = newAddedMatcher(normd)
	return nil
}

// addedEntry is one added token as matched in text.
type addedEntry struct {
	s  string
	id int32
}

// addedMatcher finds added tokens in text, leftmost first and longest at a position (HF's
// Aho-Corasick LeftmostLongest).
type addedMatcher struct {
	byFirst [256][]addedEntry // by first byte, longest first
	single  int               // the only first byte when all tokens share it, else -1
}

func newAddedMatcher(list []addedEntry) *addedMatcher {
	if len(list) == 0 {
		return nil
	}
	m := &addedMatcher{single: int(list[0].s[0])}
	for _, e := range list {
		if e.s == "" {
			continue
		}
		c := e.s[0]
		m.byFirst[c] = append(m.byFirst[c], e)
		if int(c) != m.single {
			m.single = -1
		}
	}
	for c := range m.byFirst {
		slices.SortStableFunc(m.byFirst[c], func(a, b addedEntry) int { return len(b.s) - len(a.s) })
	}
	return m
}

// find returns the first added-token match at or after byte from: its byte range and id;
// start is -1 when there is none.
func (m *addedMatcher) find(s string, from int) (start, end int, id int32) {
	if m == nil {
		return -1, -1, 0
	}
	for i := from; i < len(s); i++ {
		if m.single >= 0 {
			k := strings.IndexByte(s[i:], byte(m.single))
			if k < 0 {
				return -1, -1, 0
			}
			i += k
		}
		for _, e := range m.byFirst[s[i]] {
			if strings.HasPrefix(s[i:], e.s) {
				return i, i + len(e.s), e.id
			}
		}
	}
	return -1, -1, 0
}

// normalize applies the normalizer steps.
func (t *Tokenizer) normalize(s string) string {
	for _, f := range t.norms {
		switch f {
		case formNFC:
			s = norm.NFC.String(s)
		case formNFD:
			s = norm.NFD.String(s)
		case formNFKC:
			s = norm.NFKC.String(s)
		case formNFKD:
			s = norm.NFKD.String(s)
		}
	}
	return s
}

// ValidUTF8 returns s with every byte that is not part of a valid UTF-8 sequence replaced
// by U+FFFD (one replacement per byte, as a Go range loop decodes). Encode applies it first.
func ValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

// Encode returns the token ids of text, as HF tokenizers' encode(text,
// add_special_tokens=False) does: added tokens found in the text (special or not) become
// their ids, the rest is normalized, pre-tokenized and BPE-encoded. Invalid UTF-8 bytes are
// first replaced by U+FFFD (see ValidUTF8). The result has len ≥ 0 ids in [0, VocabSize()).
func (t *Tokenizer) Encode(text string) []int {
	text = ValidUTF8(text)
	out := make([]int, 0, len(text)/2+4) // byte-level BPE of code: ~2.8 bytes/token
	prev := 0
	for prev < len(text) {
		s, e, id := t.rawAdded.find(text, prev)
		if s < 0 {
			break
		}
		out = t.encodeNormalizedSegment(text[prev:s], out)
		out = append(out, int(id))
		prev = e
	}
	return t.encodeNormalizedSegment(text[prev:], out)
}

// encodeNormalizedSegment normalizes a text segment free of raw added tokens and encodes it.
func (t *Tokenizer) encodeNormalizedSegment(seg string, out []int) []int {
	if seg == "" {
		return out
	}
	seg = t.normalize(seg)
	prev := 0
	for prev < len(seg) {
		s, e, id := t.normAdded.find(seg, prev)
		if s < 0 {
			break
		}
		out = t.encodePlain(seg[prev:s], 0, out)
		out = append(out, int(id))
		prev = e
	}
	return t.encodePlain(seg[prev:], 0, out)
}

// encodePlain pre-tokenizes s with the splitters from level on and BPE-encodes each piece.
func (t *Tokenizer) encodePlain(s string, level int, out []int) []int {
	if s == "" {
		return out
	}
	if level == len(t.splits) {
		return t.encodeWord(s, out)
	}
	if q, ok := t.splits[level].(qwenSplitter); ok && level == len(t.splits)-1 {
		// Fast path: no closure, no allocation per piece.
		for i := 0; i < len(s); {
			e := q.next(s, i)
			out = t.encodeWord(s[i:e], out)
			i = e
		}
		return out
	}
	t.splits[level].split(s, func(a, b int) {
		out = t.encodePlain(s[a:b], level+1, out)
	})
	return out
}

// encodeWord BPE-encodes one pre-token (raw bytes), appending its ids to out.
func (t *Tokenizer) encodeWord(w string, out []int) []int {
	if len(w) == 1 {
		return append(out, int(t.byteID[w[0]]))
	}
	if t.ignoreMerges {
		if id, ok := t.vocab[byteLevelString([]byte(w))]; ok {
			return append(out, int(id))
		}
	}
	// Words of up to 3 bytes take at most 3 merge look-ups: cheaper than the cache's lock.
	cacheable := len(w) > 3 && len(w) <= cacheMaxWord
	if cacheable {
		if ids, ok := t.cache.get(w); ok {
			for _, id := range ids {
				out = append(out, int(id))
			}
			return out
		}
	}
	var buf [64]int32
	syms := buf[:0]
	if len(w) > len(buf) {
		syms = make([]int32, 0, len(w))
	}
	for i := 0; i < len(w); i++ {
		syms = append(syms, t.byteID[w[i]])
	}
	syms = t.merges.merge(syms)
	for _, id := range syms {
		out = append(out, int(id))
	}
	if cacheable {
		t.cache.put(strings.Clone(w), slices.Clone(syms))
	}
	return out
}

// EncodeBatch encodes every text (result i is Encode(texts[i])), spreading the texts over
// GOMAXPROCS goroutines.
func (t *Tokenizer) EncodeBatch(texts []string) [][]int {
	out := make([][]int, len(texts))
	workers := min(runtime.GOMAXPROCS(0), len(texts))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(texts) {
					return
				}
				out[i] = t.Encode(texts[i])
			}
		})
	}
	wg.Wait()
	return out
}

// DecodeBytes returns the bytes that ids decode to, concatenated (HF's ByteLevel decoder
// before its UTF-8 conversion, so a multi-byte character split across calls survives
// concatenation). It returns an error naming the first id that is negative, ≥ VocabSize()
// or has no token.
func (t *Tokenizer) DecodeBytes(ids []int) ([]byte, error) {
	n := 0
	for i, id := range ids {
		if id < 0 || id >= t.vocabSize || !t.hasID[id] {
			return nil, fmt.Errorf("tokenizer: ids[%d] = %d is not a token id (vocab size %d)", i, id, t.vocabSize)
		}
		n += len(t.idBytes[id])
	}
	out := make([]byte, 0, n)
	for _, id := range ids {
		out = append(out, t.idBytes[id]...)
	}
	return out, nil
}

// Decode returns the text of ids, as HF's decode(ids, skip_special_tokens=False) does:
// special tokens are written as their content, and byte sequences that are not valid UTF-8
// become U+FFFD, one per maximal ill-formed subpart (Rust's String::from_utf8_lossy). It
// returns an error naming the first id that is negative, ≥ VocabSize() or has no token.
func (t *Tokenizer) Decode(ids []int) (string, error) {
	b, err := t.DecodeBytes(ids)
	if err != nil {
		return "", err
	}
	return lossyUTF8(b), nil
}

// lossyUTF8 converts b to a string replacing each maximal ill-formed subpart by U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		out = append(out, "\uFFFD"...)
		i += maximalSubpart(b[i:])
	}
	return string(out)
}

// maximalSubpart returns the length of the maximal ill-formed subpart at the start of b
// (Unicode §3.9, U+FFFD substitution of maximal subparts), at least 1.
func maximalSubpart(b []byte) int {
	c := b[0]
	need, lo, hi := 0, byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	k := 1
	for ; k <= need && k < len(b); k++ {
		if b[k] < lo || b[k] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return k
}

// VocabSize returns one more than the largest token id (model vocabulary and added tokens),
// i.e. the number of ids for a contiguous vocabulary: 8192 for the tiny teacher, 151669 for
// Qwen3. It is not the model's embedding row count, which may be larger.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenID returns the id of a token given by its content: an added token's content
// ("<|endoftext|>") or a model vocabulary entry in its byte-level spelling ("Ġthe").
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if id, ok := t.added[s]; ok {
		return int(id), true
	}
	id, ok := t.vocab[s]
	return int(id), ok
}

// IsSpecial reports whether id is an added token marked "special" (e.g. <|endoftext|>).
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < t.vocabSize && t.special[int32(id)]
}

// Hash returns the hex SHA-256 of the tokenizer.json bytes this tokenizer was built from,
// a key for caches of tokenized data.
func (t *Tokenizer) Hash() string { return t.hash }
