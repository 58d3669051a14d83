package gpu

import "fmt"

// View returns a buffer of the given label, dtype and shape whose bytes are the first bytes
// of base: a second name for memory base owns, so that tensors never live at the same time
// can share it (nvgkit's teacher work: one layer's attention, GatedDeltaNet and MLP
// activations). Every op, upload and readback works on a view as on a buffer; the launchers'
// aliasing checks (distinct) see that two views of one base overlap, and Dispatch refuses a
// dispatch that binds views of one base read-write and read-only — so tensors that one op
// binds together must not share a base. Writing through one view changes what the others
// read; ordering is the queue's, as for any buffer.
//
// base owns the memory: releasing a view only marks it released, releasing base invalidates
// every view. A view is not counted in MemStats (base is), and base can no longer be packed
// (Pack) or kept as scratch. Errors (nothing is allocated): a nil, released or foreign base,
// a base that is itself a view or a recorder's scratch buffer, an unknown dtype or a bad
// shape, a view larger than base.
func (d *Device) View(base *Buffer, label string, dtype DType, shape ...int) (*Buffer, error) {
	unlock, err := d.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := d.checkBuffer(base); err != nil {
		return nil, fmt.Errorf("gpu: View %q: %w", label, err)
	}
	switch {
	case base.arena != nil:
		return nil, fmt.Errorf("gpu: View %q: base %q is itself a view", label, base.label)
	case base.pooled:
		return nil, fmt.Errorf("gpu: View %q: base %q is a recorder's scratch buffer", label, base.label)
	case dtype != F32 && dtype != F16 && dtype != U32:
		return nil, fmt.Errorf("gpu: View %q: unknown dtype %v", label, dtype)
	}
	n, err := shapeNumel(label, shape)
	if err != nil {
		return nil, err
	}
	size := (uint64(n)*uint64(dtype.Size()) + 3) &^ 3
	if size > base.size {
		return nil, fmt.Errorf("gpu: View %q %s%v needs %d bytes, above base %q's %d", label, dtype, shape, size, base.label, base.size)
	}
	base.isArena = true
	return &Buffer{dev: d, label: label, dtype: dtype, shape: append([]int(nil), shape...), numel: n, size: size, arena: base}, nil
}
