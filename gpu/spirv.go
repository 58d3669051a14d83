package gpu

import (
	"encoding/binary"
	"fmt"
)

// A small SPIR-V patcher (SPIR-V 1.6 specification, §2.3 "Physical Layout" and §3 for the
// opcodes): it specialises a committed cooperative-matrix kernel in Go, so the Vulkan layer
// needs no pipeline hooks. It renames the entry point (to nvg's unique "nvgcm_…" name, which
// the layer matches), rewrites the default literals of OpSpecConstant / OpSpecConstantTrue /
// OpSpecConstantFalse by their SpecId decoration, sets OpExecutionMode LocalSize, and can
// clear the Unroll hint of every loop (OpLoopMerge's LoopControl).

const (
	spirvMagic = 0x07230203

	opEntryPoint        = 15
	opExecutionMode     = 16
	opDecorate          = 71
	opSpecConstantTrue  = 48
	opSpecConstantFalse = 49
	opSpecConstant      = 50
	opFunction          = 54
	opLoopMerge         = 246

	decorationSpecID     = 1
	executionModeLocalSz = 17
	loopControlUnroll    = 1
)

// spirvWords returns the little-endian words of a SPIR-V binary. Errors: a length that is
// not a multiple of 4, a short header, or a wrong magic number.
func spirvWords(b []byte) ([]uint32, error) {
	if len(b)%4 != 0 || len(b) < 20 {
		return nil, fmt.Errorf("SPIR-V: %d bytes, want a multiple of 4 and a 5-word header", len(b))
	}
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	if w[0] != spirvMagic {
		return nil, fmt.Errorf("SPIR-V: magic %#x, want %#x (little-endian)", w[0], spirvMagic)
	}
	return w, nil
}

// spirvString decodes a literal string (UTF-8, NUL-terminated, packed little-endian into
// words) and returns it and the number of words it takes.
func spirvString(w []uint32) (string, int, error) {
	var b []byte
	for i, x := range w {
		for j := range 4 {
			c := byte(x >> (8 * j))
			if c == 0 {
				return string(b), i + 1, nil
			}
			b = append(b, c)
		}
	}
	return "", 0, fmt.Errorf("SPIR-V: unterminated string")
}

// spirvEncodeString packs s as a literal string.
func spirvEncodeString(s string) []uint32 {
	w := make([]uint32, len(s)/4+1)
	for i := range len(s) {
		w[i/4] |= uint32(s[i]) << (8 * (i % 4))
	}
	return w
}

// spirvSpec is what spirvSpecialize sets: the entry point's new name, the SpecId values
// (uint32 constants take the value, bool constants true for non-zero), and the workgroup
// size (0: unchanged). Roll clears the Unroll bit of every OpLoopMerge: the kernels' GLSL
// marks the loops over specialisation constants [[unroll]] for GPU compilers (DESIGN.md §7,
// "Tuning on Hopper"), but Mesa lavapipe's NIR honours the hint by unrolling fully, and with
// its 8×8×8 shape the attention kernels' unrolled loops grow into hundreds of cooperative-
// matrix products whose LLVM compile takes minutes and gigabytes. The hint does not change
// what a kernel computes.
type spirvSpec struct {
	Entry     string
	Values    map[uint32]uint32
	LocalSize [3]uint32
	Roll      bool
}

// spirvSpecialize returns a copy of the module w with s applied. Errors: a malformed
// instruction stream, a module with other than one entry point, a SpecId in s.Values that
// the module does not declare, or a LocalSize to set in a module without that mode.
func spirvSpecialize(w []uint32, s spirvSpec) ([]uint32, error) {
	if len(w) < 5 || w[0] != spirvMagic {
		return nil, fmt.Errorf("SPIR-V: not a module")
	}
	specOf := map[uint32]uint32{} // result id → SpecId
	type inst struct{ at, n int }
	var insts []inst
	for i := 5; i < len(w); {
		n := int(w[i] >> 16)
		if n == 0 || i+n > len(w) {
			return nil, fmt.Errorf("SPIR-V: bad instruction at word %d", i)
		}
		if op := w[i] & 0xffff; op == opDecorate && n == 4 && w[i+2] == decorationSpecID {
			specOf[w[i+1]] = w[i+3]
		}
		insts = append(insts, inst{i, n})
		i += n
	}
	out := append([]uint32(nil), w[:5]...)
	entries, sizeSet := 0, false
	seen := map[uint32]bool{}
	for _, in := range insts {
		ins := append([]uint32(nil), w[in.at:in.at+in.n]...)
		op := ins[0] & 0xffff
		switch op {
		case opEntryPoint:
			entries++
			if s.Entry != "" {
				_, nw, err := spirvString(ins[3:])
				if err != nil {
					return nil, err
				}
				ni := append(append(append([]uint32(nil), ins[:3]...), spirvEncodeString(s.Entry)...), ins[3+nw:]...)
				ni[0] = uint32(len(ni))<<16 | opEntryPoint
				ins = ni
			}
		case opExecutionMode:
			if len(ins) == 6 && ins[2] == executionModeLocalSz && s.LocalSize != [3]uint32{} {
				copy(ins[3:6], s.LocalSize[:])
				sizeSet = true
			}
		case opLoopMerge:
			if s.Roll && len(ins) >= 4 {
				ins[3] &^= loopControlUnroll
			}
		case opSpecConstant, opSpecConstantTrue, opSpecConstantFalse:
			id, ok := specOf[ins[2]]
			v, set := s.Values[id]
			if !ok || !set {
				break
			}
			seen[id] = true
			switch {
			case op == opSpecConstant && len(ins) == 4:
				ins[3] = v
			case op == opSpecConstant:
				return nil, fmt.Errorf("SPIR-V: SpecId %d is not a 32-bit constant", id)
			case v != 0:
				ins[0] = ins[0]&0xffff0000 | opSpecConstantTrue
			default:
				ins[0] = ins[0]&0xffff0000 | opSpecConstantFalse
			}
		}
		out = append(out, ins...)
	}
	if entries != 1 {
		return nil, fmt.Errorf("SPIR-V: %d entry points, want 1", entries)
	}
	for id := range s.Values {
		if !seen[id] {
			return nil, fmt.Errorf("SPIR-V: no specialization constant with SpecId %d", id)
		}
	}
	if s.LocalSize != [3]uint32{} && !sizeSet {
		return nil, fmt.Errorf("SPIR-V: no OpExecutionMode LocalSize to set")
	}
	return out, nil
}

// spirvEntryName returns the name of the module's first entry point.
func spirvEntryName(w []uint32) (string, error) {
	for i := 5; i < len(w); {
		n := int(w[i] >> 16)
		if n == 0 || i+n > len(w) {
			break
		}
		switch w[i] & 0xffff {
		case opEntryPoint:
			s, _, err := spirvString(w[i+3 : i+n])
			return s, err
		case opFunction:
			return "", fmt.Errorf("SPIR-V: no entry point")
		}
		i += n
	}
	return "", fmt.Errorf("SPIR-V: no entry point")
}
