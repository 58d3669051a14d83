package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// Qwen2Pattern is the Split pre-tokenizer regex of the Qwen2, Qwen2.5 and Qwen3 tokenizers
// and of the tiny teacher's (HF tokenizer.json, Oniguruma syntax). Tokenizers whose Split
// pattern is exactly this string (or Qwen35Pattern) use a hand-written scanner with the
// same semantics, about 20× faster than the backtracking regex (BenchmarkEncodeRegexp2);
// any other pattern runs through regexp2.
const Qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Qwen35Pattern is the Split pre-tokenizer regex of the Qwen3.5 tokenizers: Qwen2Pattern
// with combining marks (\p{M}) counted with letters, so a word keeps its marks. It also
// runs on the hand-written scanner.
const Qwen35Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// GPT2Pattern is the regex HF's ByteLevel pre-tokenizer applies when its use_regex is true.
const GPT2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// splitter cuts text into contiguous pieces, calling fn with the byte range [start, end) of
// each piece in order; the pieces cover the text exactly (HF Split, behavior "Isolated":
// every match and every gap between matches is a piece).
type splitter interface {
	split(s string, fn func(start, end int))
}

// regexSplitter is a Split pre-tokenizer on a regexp2 pattern (.NET syntax and semantics,
// which agree with Oniguruma's for the classes HF patterns use: \p{L}, \p{N} are Unicode
// general categories and \s is the Unicode White_Space property in both).
type regexSplitter struct {
	re *regexp2.Regexp
}

// newRegexSplitter compiles an HF (Oniguruma) pattern with regexp2. Literal-only
// case-insensitive groups such as (?i:'s|'t) are expanded into explicit classes of each
// letter's Unicode simple case-folding orbit ('s' ↦ [sSſ]), which is what Oniguruma's
// case folding matches and what regexp2's lower-casing comparison (unicode.ToLower) misses.
func newRegexSplitter(pattern string) (*regexSplitter, error) {
	re, err := regexp2.Compile(expandCaseFold(pattern), regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: Split pattern %q does not compile: %w", pattern, err)
	}
	return &regexSplitter{re: re}, nil
}

// split implements splitter. Matches are found on runes; offsets are mapped back to bytes.
func (r *regexSplitter) split(s string, fn func(start, end int)) {
	if s == "" {
		return
	}
	runes := []rune(s)
	// byteAt[i] is the byte offset of rune i; byteAt[len(runes)] == len(s).
	byteAt := make([]int, len(runes)+1)
	off := 0
	for i, c := range runes {
		byteAt[i] = off
		off += utf8.RuneLen(c)
	}
	byteAt[len(runes)] = off
	prev := 0
	// The regexp2 default match timeout is infinite, so FindRunesMatch/FindNextMatch
	// cannot fail; a nil match ends the search.
	m, _ := r.re.FindRunesMatch(runes)
	for m != nil {
		start, end := m.Index, m.Index+m.Length
		if end > start {
			if start > prev {
				fn(byteAt[prev], byteAt[start])
			}
			fn(byteAt[start], byteAt[end])
			prev = end
		}
		m, _ = r.re.FindNextMatch(m)
	}
	if prev < len(runes) {
		fn(byteAt[prev], byteAt[len(runes)])
	}
}

// expandCaseFold rewrites every group "(?i:…)" whose body is only letters, digits,
// apostrophes and '|' into "(?:…)" with each letter replaced by the class of its simple
// case-folding orbit. Other groups are left to regexp2's own IgnoreCase handling.
func expandCaseFold(p string) string {
	var b strings.Builder
	for {
		i := strings.Index(p, "(?i:")
		if i < 0 {
			b.WriteString(p)
			return b.String()
		}
		j := strings.IndexByte(p[i:], ')')
		if j < 0 {
			b.WriteString(p)
			return b.String()
		}
		body := p[i+4 : i+j]
		plain := true
		for _, c := range body {
			if !(unicode.IsLetter(c) || unicode.IsDigit(c) || c == '\'' || c == '|') {
				plain = false
				break
			}
		}
		b.WriteString(p[:i])
		if !plain {
			b.WriteString(p[i : i+j+1])
		} else {
			b.WriteString("(?:")
			for _, c := range body {
				if !unicode.IsLetter(c) || unicode.SimpleFold(c) == c {
					b.WriteRune(c)
					continue
				}
				b.WriteByte('[')
				for f := c; ; {
					b.WriteRune(f)
					if f = unicode.SimpleFold(f); f == c {
						break
					}
				}
				b.WriteByte(']')
			}
			b.WriteByte(')')
		}
		p = p[i+j+1:]
	}
}

// Character classes of the Qwen2 pattern, as bit flags.
const (
	clL    = 1 << iota // \p{L}
	clN                // \p{N}
	clS                // \s (Unicode White_Space)
	clCRLF             // \r or \n
	clM                // \p{M}
)

// asciiClass holds the class flags of the ASCII bytes.
var asciiClass [128]uint8

func init() {
	for c := 0; c < 128; c++ {
		asciiClass[c] = classOfRune(rune(c))
	}
}

func classOfRune(c rune) uint8 {
	var f uint8
	if unicode.IsLetter(c) {
		f |= clL
	}
	if unicode.IsNumber(c) {
		f |= clN
	}
	if unicode.IsSpace(c) {
		f |= clS
	}
	if c == '\r' || c == '\n' {
		f |= clCRLF
	}
	if unicode.IsMark(c) {
		f |= clM
	}
	return f
}

// classAt decodes the rune at byte i of s, returning it, its byte length and its flags.
func classAt(s string, i int) (rune, int, uint8) {
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return r, n, classOfRune(r)
}

// qwenSplitter is a hand-written matcher for Qwen2Pattern (letters = clL) and
// Qwen35Pattern (letters = clL|clM), with leftmost-first alternation and greedy,
// backtracking quantifiers, as the regex engine would run them.
type qwenSplitter struct {
	letters uint8 // the class of the word runs: \p{L}, or [\p{L}\p{M}]
}

var (
	qwen2Splitter  = qwenSplitter{letters: clL}
	qwen35Splitter = qwenSplitter{letters: clL | clM}
)

func (q qwenSplitter) split(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		e := q.next(s, i)
		fn(i, e)
		i = e
	}
}

// foldIs reports whether the rune at s[i:] is in the simple case-folding orbit of the ASCII
// lower-case letter l, returning its byte length (0 if not). Of the letters of the
// contractions (s t r e v m l d) only s has a non-ASCII member, U+017F ſ.
func foldIs(s string, i int, l byte) int {
	if i >= len(s) {
		return 0
	}
	c := s[i]
	if c|0x20 == l {
		return 1
	}
	if l == 's' && strings.HasPrefix(s[i:], "ſ") { // U+017F LATIN SMALL LETTER LONG S
		return 2
	}
	return 0
}

// contractions are the suffixes of the pattern's first alternative, (?i:'s|'t|'re|'ve|'m|'ll|'d),
// in its order.
var contractions = []string{"s", "t", "re", "ve", "m", "ll", "d"}

// next returns the end of the pattern's match that starts at byte i (< len(s)). The
// pattern matches at every position, so pieces are contiguous.
func (q qwenSplitter) next(s string, i int) int {
	c, n, f := classAt(s, i)
	// 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if c == '\'' {
		for _, suffix := range contractions {
			j := i + 1
			for r := 0; r < len(suffix); r++ {
				k := foldIs(s, j, suffix[r])
				if k == 0 {
					j = -1
					break
				}
				j += k
			}
			if j > 0 {
				return j
			}
		}
	}
	// 2. [^\r\n\p{L}\p{N}]?\p{L}+ (Qwen3.5: [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+). A rune of
	// the run class starts the run itself (a mark as the optional rune is then also in it).
	if f&q.letters != 0 {
		return scanClass(s, i+n, q.letters, true)
	}
	if f&(clCRLF|clN|clL) == 0 && i+n < len(s) {
		if _, _, f2 := classAt(s, i+n); f2&q.letters != 0 {
			return scanClass(s, i+n, q.letters, true)
		}
	}
	// 3. \p{N}
	if f&clN != 0 {
		return i + n
	}
	// 4. ` ?[^\s\p{L}\p{N}]+[\r\n]*` (Qwen3.5: ` ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*`)
	j := i
	if c == ' ' {
		j = i + 1
	}
	if k := scanClass(s, j, clS|clN|q.letters, false); k > j {
		for k < len(s) && (s[k] == '\r' || s[k] == '\n') {
			k++
		}
		return k
	}
	// Here c is whitespace. 5. \s*[\r\n]+ — ends after the last \r or \n of the run.
	// 6. \s+(?!\S) — the run, less its last rune unless the run ends the text.
	// 7. \s+ — the run.
	e, lastNL, lastStart := i, -1, i
	for e < len(s) {
		_, m, fe := classAt(s, e)
		if fe&clS == 0 {
			break
		}
		if fe&clCRLF != 0 {
			lastNL = e
		}
		lastStart = e
		e += m
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	if e == len(s) || lastStart == i {
		return e
	}
	return lastStart
}

// scanClass advances from byte j over runes whose flags intersect mask (want true) or do
// not intersect it (want false), returning the first byte offset where that stops.
func scanClass(s string, j int, mask uint8, want bool) int {
	for j < len(s) {
		_, m, f := classAt(s, j)
		if (f&mask != 0) != want {
			break
		}
		j += m
	}
	return j
}
