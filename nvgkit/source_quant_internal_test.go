package nvgkit

import (
	"strings"
	"testing"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/cmf"
	"github.com/nvg-project/nvg/cmf/tinyteacher"
	"github.com/nvg-project/nvg/gpu/gputest"
)

// badQuantSource is the tiny teacher's modelSource whose Quant gives every projection as
// edit makes it from the q8 plane.
type badQuantSource struct {
	*modelSource
	edit func(*QuantPlane)
}

func (s badQuantSource) Quant(t arch.Tensor, host bool) (*QuantPlane, error) {
	q, err := s.modelSource.Quant(t, host)
	if q != nil {
		s.edit(q)
	}
	return q, err
}

// TestBuildNetBadQuantPlanes checks that BuildNet refuses a Source's malformed 8-bit
// projections — an unknown format, a bad block, codes or scales of the wrong size — naming
// the tensor, resident and streamed, and leaves nothing on the GPU.
func TestBuildNetBadQuantPlanes(t *testing.T) {
	d := gputest.Open(t)
	m, err := tinyteacher.Open()
	if err != nil {
		t.Fatal(err)
	}
	q, err := cmf.QuantizeModel(m, cmf.QuantQ8)
	if err != nil {
		t.Fatal(err)
	}
	d.FreeScratch()
	before := d.MemStats()
	for _, c := range []struct {
		name, want string
		edit       func(*QuantPlane)
	}{
		{"unknown format", "8-bit weight of format QuantFormat(7)", func(p *QuantPlane) { p.Format = 7 }},
		{"zero block", "block [0 128]", func(p *QuantPlane) { p.Block[0] = 0 }},
		{"short codes", "want 49152 of u32", func(p *QuantPlane) { p.Codes.U32 = p.Codes.U32[:len(p.Codes.U32)-1] }},
		{"scales of another block", "_scale: the source gave", func(p *QuantPlane) { p.Block = [2]int{2, 128} }},
	} {
		for _, streamed := range []bool{false, true} {
			var opts []LoadOption
			if streamed {
				opts = append(opts, StreamLayers())
			}
			src := badQuantSource{&modelSource{m: q, dev: d}, c.edit}
			_, err := BuildNet(d, q.Config, Teacher, src, opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "model.layers.0.mlp.gate_proj.weight") {
				t.Errorf("%s (streamed %v): %v, want an error naming the tensor and %q", c.name, streamed, err, c.want)
			}
			if after := d.MemStats(); after.Buffers != before.Buffers || after.CurrentBytes != before.CurrentBytes {
				t.Errorf("%s: a refused BuildNet left buffers behind: %+v → %+v", c.name, before, after)
			}
		}
	}
}
