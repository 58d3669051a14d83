package gpu

import (
	"fmt"
	"math"
)

const maxF32 = math.MaxFloat32

func f32bits(x float64) uint32 { return math.Float32bits(float32(x)) }

// Zero records b ← 0 for every byte of the buffer b (any dtype and shape: zero bits are 0 in
// f32, f16 and u32), e.g. gradients before a step's accumulation. A buffer larger than one
// binding is cleared in slices of at most maxStorageBufferBindingSize. Errors: a nil or
// released buffer.
func Zero(r *Recorder, b *Buffer) error {
	const op = "Zero"
	if err := b.usable(); err != nil {
		return fmt.Errorf("gpu: %s: b: %w", op, err)
	}
	k, err := r.d.Kernel(KernelSpec{Name: op, File: "zero.wgsl", Params: struct{ WG int }{gradWG},
		Bindings: []Access{ReadWrite}, Uniforms: 1})
	if err != nil {
		return err
	}
	align := r.d.StorageAlign()
	chunk := r.d.info.MaxStorageBindingSize / align * align
	mark := len(r.ops)
	for off := uint64(0); off < b.size; off += chunk {
		size := min(chunk, b.size-off)
		words := int(size / 4)
		grid, err := Grid1D((words + gradWG - 1) / gradWG)
		if err != nil {
			r.ops = r.ops[:mark]
			return fmt.Errorf("gpu: %s: %w", op, err)
		}
		if err := r.Dispatch(k, grid, []uint32{uint32(words)}, Binding{Buf: b, Offset: off, Size: size}); err != nil {
			r.ops = r.ops[:mark]
			return err
		}
	}
	return nil
}
