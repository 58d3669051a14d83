package gpu

import "fmt"

// SetCoopmatShader selects the tuning experiment's SPIR-V set (coopmat/x/<name>, as
// NVG_COOPMAT_SHADER; "" the committed one) and returns a function restoring the old one.
// Errors: no such set.
func SetCoopmatShader(name string) (restore func(), err error) {
	if name != "" {
		if _, err := coopFS.ReadFile("coopmat/x/" + name + "/coopmat_gemm.spv"); err != nil {
			return nil, fmt.Errorf("coopmat shader set %q: %w", name, err)
		}
	}
	old := coopShader
	coopShader = name
	return func() { coopShader = old }, nil
}
