package server

import (
	"log"
	"os"

	"github.com/nvg-project/nvg/nvgkit"
	_ "github.com/nvg-project/nvg/nvgkit/gradcheck" // GradCheck's float64 host reference
	"github.com/nvg-project/nvg/nvgkit/session"
)

// NewLab returns the in-process Lab a session server serves (nvgkit.NewLab with its phase
// log on stderr, which is the session's log file when the server was spawned); GradCheck's
// host reference is linked in.
func NewLab() (session.Lab, error) {
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	return nvgkit.NewLab(nvgkit.LabLog(logger.Printf))
}

// Run serves a new in-process Lab as session name (`nvg session serve NAME`).
func Run(name string, cfg Config) error {
	lab, err := NewLab()
	if err != nil {
		return err
	}
	return Serve(name, lab, cfg)
}
