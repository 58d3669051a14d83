package tokenizer

import "unicode/utf8"

// byteToRune is GPT-2's bytes_to_unicode table: byte b of the input is written as the
// rune byteToRune[b] in byte-level vocabulary strings. Printable Latin-1 bytes map to
// themselves; the other 68 bytes map to U+0100..U+0143 in byte order.
var byteToRune [256]rune

// runeToByte inverts byteToRune; ok is false for runes that are not in the table.
var runeToByte = map[rune]byte{}

func init() {
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		if printable(b) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelString maps raw bytes to their byte-level vocabulary spelling.
func byteLevelString(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, byteToRune[c])
	}
	return string(out)
}

// tokenBytes returns the bytes a token string decodes to under HF's ByteLevel decoder:
// each rune mapped back through the byte table when every rune of the token is in it,
// otherwise the token's own UTF-8 bytes (HF falls back the same way, per token).
func tokenBytes(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return []byte(tok)
		}
		out = append(out, b)
	}
	return out
}
