package gpu

import (
	"fmt"
	"sort"
)

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

// arg is one F32 buffer argument of a launcher, for needF32: its name in errors, the buffer
// and its element count.
type arg struct {
	name string
	b    *Buffer
	n    int
}

// needF32 checks each argument in order with need (F32 of its length), then that no two of
// them overlap (distinct).
func needF32(op string, args ...arg) error {
	bufs := make(map[string]*Buffer, len(args))
	for _, a := range args {
		if err := need(op, a.name, a.b, a.n, F32); err != nil {
			return err
		}
		bufs[a.name] = a.b
	}
	return distinct(op, bufs)
}

func positive(op string, names string, vals ...int) error {
	for _, v := range vals {
		if v <= 0 {
			return fmt.Errorf("gpu: %s: %s = %v must be positive", op, names, vals)
		}
	}
	return nil
}

// distinct errors when two of bufs are the same buffer or views whose bytes overlap (Pack).
func distinct(op string, bufs map[string]*Buffer) error {
	names := make([]string, 0, len(bufs))
	for name := range bufs {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, a := range names {
		for _, b := range names[i+1:] {
			x, y := bufs[a], bufs[b]
			if x == y {
				return fmt.Errorf("gpu: %s: %s and %s are the same buffer %q", op, a, b, x.label)
			}
			rx, ox := x.root()
			ry, oy := y.root()
			if rx == ry && ox < oy+y.size && oy < ox+x.size {
				return fmt.Errorf("gpu: %s: %s (%q) and %s (%q) overlap in arena %q", op, a, x.label, b, y.label, rx.label)
			}
		}
	}
	return nil
}

const maxU32Elems = 1<<31 - 1
