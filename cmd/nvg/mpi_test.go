//go:build !mpi

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A binary built without MPI and started as one of several ranks (the environment mpirun
// sets) refuses to run, exit status 2, naming the build command, before doing anything.
func TestNoMPIUnderMpirun(t *testing.T) {
	if os.Getenv("NVG_TEST_NOMPI") == "1" {
		os.Exit(run([]string{"info"}))
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestNoMPIUnderMpirun$")
	cmd.Env = append(os.Environ(), "NVG_TEST_NOMPI=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=1")
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "go build -tags mpi ./cmd/nvg") {
		t.Fatalf("exit %v, output %q; want exit status 2 naming go build -tags mpi", err, out)
	}
}
