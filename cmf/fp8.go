package cmf

import (
	"math"
)

// FP8E4M3Max is the largest finite float8_e4m3fn value, 448 = 1.75·2⁸ (code 0x7E).
const FP8E4M3Max = 448

// e4m3Values holds the value of every float8_e4m3fn code (FP8E4M3Value).
var e4m3Values = func() (v [256]float32) {
	for c := range v {
		v[c] = e4m3Bits(byte(c))
	}
	return v
}()

// e4m3Bits builds code c's float32 from its bit fields: the exponent rebiased from 7 to
// 127 and the 3 mantissa bits moved to the top of the 23; a subnormal code (exponent 0) is
// m·2⁻⁹, exact in float32.
func e4m3Bits(c byte) float32 {
	sign := uint32(c>>7) << 31
	e, m := uint32(c>>3)&0xF, uint32(c)&7
	switch {
	case e == 0xF && m == 7:
		return math.Float32frombits(sign | 0x7FC00000) // NaN
	case e == 0:
		return math.Float32frombits(sign | math.Float32bits(float32(m)*0x1p-9))
	}
	return math.Float32frombits(sign | (e+127-7)<<23 | m<<20)
}

// FP8E4M3Value returns the value of the float8_e4m3fn code c — the OCP FP8 E4M3 format that
// PyTorch calls torch.float8_e4m3fn and safetensors F8_E4M3: bit 7 the sign, bits 6–3 the
// exponent e (bias 7), bits 2–0 the mantissa m; e > 0 gives ±(1 + m/8)·2^(e−7), e = 0 the
// subnormal ±m·2⁻⁹; no infinities ("fn": finite), and the codes 0x7F and 0xFF are NaN, so
// the largest value is ±448 (0x7E, 0xFE). Every value is exact in float32.
func FP8E4M3Value(c byte) float32 { return e4m3Values[c] }

// FP8E4M3Code returns the float8_e4m3fn code nearest to x (round to nearest, ties to even,
// as PyTorch's x.to(torch.float8_e4m3fn)); a magnitude of 448 or more, infinities included,
// saturates to ±448 (the quantizers clamp to ±448 first, as transformers' does, so PyTorch's
// NaN for values that would round beyond 448 never arises), NaN gives 0x7F, and −0 gives 0x80.
func FP8E4M3Code(x float32) byte {
	if x != x {
		return 0x7F
	}
	var sign byte
	if math.Signbit(float64(x)) {
		sign, x = 0x80, -x
	}
	a := float64(x)
	if a >= FP8E4M3Max {
		return sign | 0x7E
	}
	if a < 0x1p-6 { // subnormal range: steps of 2⁻⁹; m = 8 is the smallest normal, code 0x08
		return sign | byte(math.RoundToEven(a*0x1p9))
	}
	frac, exp := math.Frexp(a) // a = frac·2^exp, frac in [0.5, 1)
	e := exp - 1               // a = (1 + f)·2^e
	m := math.RoundToEven((frac*2 - 1) * 8)
	if m == 8 {
		e, m = e+1, 0
	}
	return sign | byte(e+7)<<3 | byte(m)
}
