package bench

import "fmt"

// Validate reports the first count of o below 1 (Reps, Warm, NB, T, Steps), naming nvg
// session bench's flag: "--reps 0: want ≥ 1".
func (o SessionOptions) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"reps", o.Reps}, {"warm", o.Warm}, {"nb", o.NB}, {"t", o.T}, {"steps", o.Steps}} {
		if f.v < 1 {
			return fmt.Errorf("--%s %d: want ≥ 1", f.name, f.v)
		}
	}
	return nil
}
