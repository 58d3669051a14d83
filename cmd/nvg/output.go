package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// checkOutFile validates an output file path before any work: not a directory, its directory
// exists, and (unless force) nothing is there yet. flag names the option in the message.
func checkOutFile(flag, p string, force bool) error {
	st, err := os.Stat(p)
	switch {
	case err == nil && st.IsDir():
		return usagef("%s %s is a directory; give a file path", flag, p)
	case err == nil && !force:
		return usagef("%s %s exists; pass --force to replace it", flag, p)
	case err != nil && !os.IsNotExist(err):
		return usagef("%s %s: %v", flag, p, err)
	}
	dir := filepath.Dir(p)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usagef("%s %s: directory %s does not exist", flag, p, dir)
	}
	return nil
}

// bpwMissWarning says on stderr when the compressed model's bits per weight miss the
// --bpw target by more than 10 % (ranks are whole, at least 8 and at most full rank, so very
// small or very large targets cannot be met).
func bpwMissWarning(target, got float64) {
	if math.Abs(got-target) > 0.1*target {
		fmt.Fprintf(os.Stderr, "nvg: warning: the student has %.4f bits/weight, not the --bpw %g asked for (ranks are whole, at least 8 and at most the matrix's full rank)\n", got, target)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
