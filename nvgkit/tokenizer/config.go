package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The parts of HF's tokenizer.json this package reads.
type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

type addedTokenJSON struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]int    `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
}

// typed is any component object: only its "type" is read first.
type typed struct {
	Type string `json:"type"`
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

func typeOf(raw json.RawMessage, what string) (string, error) {
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", fmt.Errorf("tokenizer: %s: %w", what, err)
	}
	if t.Type == "" {
		return "", fmt.Errorf("tokenizer: %s has no \"type\"", what)
	}
	return t.Type, nil
}

// normForm is one Unicode normalization step.
type normForm int

const (
	formNFC normForm = iota
	formNFD
	formNFKC
	formNFKD
)

// parseNormalizer reads the "normalizer" section: null, NFC, NFD, NFKC, NFKD or a Sequence
// of those.
func parseNormalizer(raw json.RawMessage) ([]normForm, error) {
	if isNull(raw) {
		return nil, nil
	}
	t, err := typeOf(raw, "normalizer")
	if err != nil {
		return nil, err
	}
	switch t {
	case "NFC":
		return []normForm{formNFC}, nil
	case "NFD":
		return []normForm{formNFD}, nil
	case "NFKC":
		return []normForm{formNFKC}, nil
	case "NFKD":
		return []normForm{formNFKD}, nil
	case "Sequence":
		var seq struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return nil, fmt.Errorf("tokenizer: normalizer Sequence: %w", err)
		}
		var out []normForm
		for _, n := range seq.Normalizers {
			f, err := parseNormalizer(n)
			if err != nil {
				return nil, err
			}
			out = append(out, f...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("tokenizer: normalizer type %q not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)", t)
}

// parsePreTokenizer reads the "pre_tokenizer" section. Supported: a ByteLevel
// pre-tokenizer (add_prefix_space false), alone or last in a Sequence whose other members
// are Split pre-tokenizers with behavior "Isolated" and invert false. It returns the
// splitters to apply in order.
func parsePreTokenizer(raw json.RawMessage) ([]splitter, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("tokenizer: no pre_tokenizer: only byte-level BPE (a ByteLevel pre-tokenizer) is supported")
	}
	t, err := typeOf(raw, "pre_tokenizer")
	if err != nil {
		return nil, err
	}
	var members []json.RawMessage
	switch t {
	case "Sequence":
		var seq struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return nil, fmt.Errorf("tokenizer: pre_tokenizer Sequence: %w", err)
		}
		members = seq.PreTokenizers
	default:
		members = []json.RawMessage{raw}
	}
	var out []splitter
	sawByteLevel := false
	for i, m := range members {
		mt, err := typeOf(m, fmt.Sprintf("pre_tokenizer %d", i))
		if err != nil {
			return nil, err
		}
		if sawByteLevel {
			return nil, fmt.Errorf("tokenizer: pre_tokenizer %s after ByteLevel not supported (ByteLevel must come last)", mt)
		}
		switch mt {
		case "Split":
			s, err := parseSplit(m)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		case "ByteLevel":
			var bl struct {
				AddPrefixSpace bool  `json:"add_prefix_space"`
				UseRegex       *bool `json:"use_regex"`
			}
			if err := json.Unmarshal(m, &bl); err != nil {
				return nil, fmt.Errorf("tokenizer: pre_tokenizer ByteLevel: %w", err)
			}
			if bl.AddPrefixSpace {
				return nil, fmt.Errorf("tokenizer: pre_tokenizer ByteLevel with add_prefix_space true not supported")
			}
			if bl.UseRegex == nil || *bl.UseRegex { // HF's default is true
				s, err := newRegexSplitter(GPT2Pattern)
				if err != nil {
					return nil, err
				}
				out = append(out, s)
			}
			sawByteLevel = true
		default:
			return nil, fmt.Errorf("tokenizer: pre_tokenizer type %q not supported (supported: Sequence, Split, ByteLevel)", mt)
		}
	}
	if !sawByteLevel {
		return nil, fmt.Errorf("tokenizer: pre_tokenizer has no ByteLevel step: only byte-level BPE is supported")
	}
	return out, nil
}

func parseSplit(raw json.RawMessage) (splitter, error) {
	var sp struct {
		Pattern struct {
			Regex  *string `json:"Regex"`
			String *string `json:"String"`
		} `json:"pattern"`
		Behavior string `json:"behavior"`
		Invert   bool   `json:"invert"`
	}
	if err := json.Unmarshal(raw, &sp); err != nil {
		return nil, fmt.Errorf("tokenizer: pre_tokenizer Split: %w", err)
	}
	if sp.Behavior != "Isolated" {
		return nil, fmt.Errorf("tokenizer: pre_tokenizer Split behavior %q not supported (only Isolated)", sp.Behavior)
	}
	if sp.Invert {
		return nil, fmt.Errorf("tokenizer: pre_tokenizer Split with invert true not supported")
	}
	switch {
	case sp.Pattern.Regex != nil:
		switch *sp.Pattern.Regex {
		case Qwen2Pattern:
			return qwen2Splitter, nil
		case Qwen35Pattern:
			return qwen35Splitter, nil
		}
		return newRegexSplitter(*sp.Pattern.Regex)
	case sp.Pattern.String != nil:
		if *sp.Pattern.String == "" {
			return nil, fmt.Errorf("tokenizer: pre_tokenizer Split with an empty String pattern")
		}
		return newRegexSplitter(regexpEscape(*sp.Pattern.String))
	}
	return nil, fmt.Errorf("tokenizer: pre_tokenizer Split pattern has neither Regex nor String")
}

// regexpEscape quotes every regex metacharacter of s.
func regexpEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$#&-~`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// checkDecoder accepts a ByteLevel decoder (its options do not change decoding), alone or
// as the only member of a Sequence.
func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return fmt.Errorf("tokenizer: no decoder: only the ByteLevel decoder is supported")
	}
	t, err := typeOf(raw, "decoder")
	if err != nil {
		return err
	}
	if t == "Sequence" {
		var seq struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return fmt.Errorf("tokenizer: decoder Sequence: %w", err)
		}
		if len(seq.Decoders) != 1 {
			return fmt.Errorf("tokenizer: decoder Sequence of %d decoders not supported (only one ByteLevel)", len(seq.Decoders))
		}
		return checkDecoder(seq.Decoders[0])
	}
	if t != "ByteLevel" {
		return fmt.Errorf("tokenizer: decoder type %q not supported (only ByteLevel)", t)
	}
	return nil
}

// checkPostProcessor accepts the post-processors that leave an encoding without special
// tokens unchanged (Encode never adds special tokens): null, ByteLevel (offsets only) and
// TemplateProcessing.
func checkPostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	t, err := typeOf(raw, "post_processor")
	if err != nil {
		return err
	}
	switch t {
	case "ByteLevel", "TemplateProcessing":
		return nil
	}
	return fmt.Errorf("tokenizer: post_processor type %q not supported (supported: ByteLevel, TemplateProcessing)", t)
}

// parseMerge reads one merges entry: "a b" or ["a", "b"].
func parseMerge(raw json.RawMessage, i int) (string, string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return "", "", fmt.Errorf("tokenizer: merges[%d] = %q is not two space-separated tokens", i, s)
		}
		return a, b, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return "", "", fmt.Errorf("tokenizer: merges[%d] = %s is neither \"a b\" nor [\"a\", \"b\"]", i, string(raw))
	}
	return pair[0], pair[1], nil
}
