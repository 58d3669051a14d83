package gpu

import "fmt"

// need checks that b is usable, has dtype t (any of ts) and exactly n elements; op and
// name prefix the error.
func need(op, name string, b *Buffer, n int, ts ...DType) error {
	if err := b.usable(); err != nil {
		return fmt.Errorf("gpu: %s: %s: %w", op, name, err)
	}
	ok := false
	for _, t := range ts {
		ok = ok || b.dtype == t
	}
	if !ok {
		return fmt.Errorf("gpu: %s: %s is %s, want %v", op, name, b, ts)
	}
	if n >= 0 && b.numel != n {
		return fmt.Errorf("gpu: %s: %s %v has %d elements, want %d", op, name, b, b.numel, n)
	}
	return nil
}

func positive(op string, names string, vals ...int) error {
	for _, v := range vals {
		if v <= 0 {
			return fmt.Errorf("gpu: %s: %s = %v must be positive", op, names, vals)
		}
	}
	return nil
}

func distinct(op string, bufs map[string]*Buffer) error {
	seen := map[*Buffer]string{}
	for name, b := range bufs {
		if other, ok := seen[b]; ok {
			return fmt.Errorf("gpu: %s: %s and %s are the same buffer %q", op, other, name, b.label)
		}
		seen[b] = name
	}
	return nil
}

const maxU32Elems = 1<<31 - 1
