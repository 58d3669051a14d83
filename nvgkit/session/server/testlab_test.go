package server

import (
	"fmt"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session"
)

// newTestLab returns the lab a test server serves: "fake" (no GPU) or "gpu" (the
// in-process nvgkit Lab that nvg session serve runs).
func newTestLab(kind string) (session.Lab, error) {
	switch kind {
	case "fake":
		return &fakeLab{stepTime: 20 * time.Millisecond}, nil
	case "gpu":
		return NewLab()
	}
	return nil, fmt.Errorf("unknown test lab %q", kind)
}
