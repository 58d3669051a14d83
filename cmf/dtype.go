package cmf

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// DType is the element type of a tensor as stored in a file.
type DType string

// The element types nvg reads and writes. F32, F16, BF16, F64, I64, I32, U8, F8E4M3 and I8
// are plain safetensors dtypes; BLR is nvg's binary low-rank payload (DESIGN.md §4), stored
// in the safetensors file as a U8 entry of shape [nbytes] and described in the CMF metadata.
// F8E4M3 (float8_e4m3fn codes) and I8 (int8 codes) hold the weights of 8-bit quantized
// tensors, whose scales come with them (Tensor.Quant, quant.go).
const (
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	F64    DType = "F64"
	I64    DType = "I64"
	I32    DType = "I32"
	U8     DType = "U8"
	F8E4M3 DType = "F8_E4M3"
	I8     DType = "I8"
	BLR    DType = "blr"
)

// Size returns the bytes per element of a plain dtype, or 0 for BLR and unknown dtypes.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	case U8, F8E4M3, I8:
		return 1
	}
	return 0
}

// Float reports whether d is a floating-point dtype that DecodeFloat64 can convert.
func (d DType) Float() bool { return d == F32 || d == F16 || d == BF16 || d == F64 }

// DecodeFloat64 converts little-endian raw elements of dtype d to float64.
// It supports F64, F32, F16, BF16, I64 and I32, and returns an error for any other dtype
// (F8E4M3 and I8 codes mean nothing without their scales: Tensor.Float64 dequantizes them)
// or when len(raw) is not a multiple of the element size.
func DecodeFloat64(d DType, raw []byte) ([]float64, error) {
	sz := d.Size()
	if sz == 0 || d == U8 || d == F8E4M3 || d == I8 {
		return nil, fmt.Errorf("cannot convert dtype %s to float64", d)
	}
	if len(raw)%sz != 0 {
		return nil, fmt.Errorf("%d bytes is not a multiple of %s element size %d", len(raw), d, sz)
	}
	n := len(raw) / sz
	out := make([]float64, n)
	for i := range out {
		b := raw[i*sz:]
		switch d {
		case F64:
			out[i] = math.Float64frombits(le64(b))
		case I64:
			out[i] = float64(int64(le64(b)))
		case F32:
			out[i] = float64(math.Float32frombits(le32(b)))
		case I32:
			out[i] = float64(int32(le32(b)))
		case F16:
			out[i] = float64(float16.Frombits(uint16(b[0]) | uint16(b[1])<<8).Float32())
		case BF16:
			out[i] = float64(math.Float32frombits(uint32(b[0])<<16 | uint32(b[1])<<24))
		}
	}
	return out, nil
}

// EncodeFloat64 converts float64 values to little-endian raw elements of dtype d
// (F64, F32, F16 or BF16; F16 and BF16 round to nearest even).
func EncodeFloat64(d DType, v []float64) ([]byte, error) {
	sz := d.Size()
	if !d.Float() {
		return nil, fmt.Errorf("cannot encode float64 as dtype %s", d)
	}
	out := make([]byte, len(v)*sz)
	for i, x := range v {
		b := out[i*sz:]
		switch d {
		case F64:
			put64(b, math.Float64bits(x))
		case F32:
			put32(b, math.Float32bits(float32(x)))
		case F16:
			h := float16.Fromfloat32(float32(x)).Bits()
			b[0], b[1] = byte(h), byte(h>>8)
		case BF16:
			h := BF16Bits(float32(x))
			b[0], b[1] = byte(h), byte(h>>8)
		}
	}
	return out, nil
}

// BF16Bits rounds f to bfloat16 (round to nearest, ties to even; NaN stays NaN) and
// returns its bit pattern.
func BF16Bits(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func put64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}
func put32(b []byte, v uint32) {
	for i := 0; i < 4; i++ {
		b[i] = byte(v >> (8 * i))
	}
}
