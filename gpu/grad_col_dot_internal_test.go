package gpu

import (
	"testing"

	"github.com/oliverbestmann/webgpu/wgpu"
)

// TestColDotWindowPlan checks the window form's plan without a device, for the uniform
// offset alignments adapters report (lavapipe's 32 and larger ones): every window's view is
// aligned, lies within the operand's bytes, is at most one binding, and holds its rows; the
// windows cover the rows in order.
func TestColDotWindowPlan(t *testing.T) {
	lavapipe := &Device{info: Info{CPU: true}, limits: wgpu.Limits{
		MinUniformBufferOffsetAlignment: 32, MaxUniformBufferBindingSize: 65536, MaxUniformBuffersPerShaderStage: 15}}
	// The tiny step's largest pair, [256, 768]: 21 rows of 3 KiB per 64 KiB view, 4 windows
	// (12 views) per dispatch.
	if w, ok := lavapipe.colDotWindows(256, 768, colDotArgs{c2: &Buffer{}}); !ok || w.W != 21 || w.NW != 4 || w.V != 65536 {
		t.Errorf("lavapipe's plan of a 256 × 768 pair: %+v (ok %v), want 21 rows, 4 windows, 65536-byte views", w, ok)
	}
	if _, ok := (&Device{limits: lavapipe.limits}).colDotWindows(256, 768, colDotArgs{}); ok {
		t.Error("a GPU got a window plan")
	}
	for _, ualign := range []uint32{32, 64, 256} {
		d := &Device{info: Info{CPU: true}, limits: lavapipe.limits}
		d.limits.MinUniformBufferOffsetAlignment = ualign
		for _, rows := range []int{1, 5, 37, 256, 301, 512, 1000} {
			for _, n := range []int{4, 12, 128, 768, 1004, 4096, 16000} {
				for _, two := range []bool{false, true} {
					x := colDotArgs{}
					if two {
						x.c2 = &Buffer{}
					}
					w, ok := d.colDotWindows(rows, n, x)
					if !ok {
						if 4*n+int(ualign) <= 65536 {
							t.Errorf("align %d, %d × %d: no plan", ualign, rows, n)
						}
						continue
					}
					if w.V%16 != 0 || w.V > 65536 || w.W < 1 || w.NW < 1 || w.NW > 4 || (two && 3*w.NW > 14) {
						t.Errorf("align %d, %d × %d: plan %+v", ualign, rows, n, w)
					}
					l := uint64(4 * rows * n)
					for i := 0; i*w.W < rows; i++ {
						off, base := w.view(i, rows, n, uint64(ualign))
						rw := min(w.W, rows-i*w.W)
						start := 16*base + off
						if off%uint64(ualign) != 0 || off+uint64(w.V) > l || start != uint64(4*i*w.W*n) || start+uint64(4*rw*n) > off+uint64(w.V) {
							t.Errorf("align %d, %d × %d, plan %+v, window %d: view [%d, +%d), first element at byte %d, %d rows", ualign, rows, n, w, i, off, w.V, start, rw)
						}
					}
				}
			}
		}
	}
}
