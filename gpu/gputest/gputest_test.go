package gputest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestChildOpen is the body run in a child process by TestNoAdapterPolicy.
func TestChildOpen(t *testing.T) {
	if os.Getenv("GPUTEST_CHILD") != "1" {
		t.Skip("run by TestNoAdapterPolicy in a child process")
	}
	Open(t)
	t.Log("device opened")
}

// TestNoAdapterPolicy hides every Vulkan driver from a child test process
// (VK_ICD_FILENAMES pointing at nothing) and checks the helper's policy: without
// NVG_REQUIRE_GPU the GPU test is skipped, with NVG_REQUIRE_GPU=1 it fails.
func TestNoAdapterPolicy(t *testing.T) {
	if os.Getenv("GPUTEST_CHILD") == "1" {
		return
	}
	run := func(require string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildOpen$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "GPUTEST_CHILD=1", "VK_ICD_FILENAMES=/nonexistent/icd.json",
			"VK_DRIVER_FILES=/nonexistent/icd.json", "NVG_REQUIRE_GPU="+require, "NVG_ADAPTER=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	if err != nil || !strings.Contains(out, "--- SKIP: TestChildOpen") {
		t.Errorf("without NVG_REQUIRE_GPU: want a skip, got err=%v\n%s", err, out)
	}
	out, err = run("1")
	if err == nil || !strings.Contains(out, "--- FAIL: TestChildOpen") || !strings.Contains(out, "NVG_REQUIRE_GPU=1") {
		t.Errorf("with NVG_REQUIRE_GPU=1: want a failure, got err=%v\n%s", err, out)
	}
}
