package server

import (
	"github.com/nvg-project/nvg/nvgkit/train"
	"log"
	"os"

	_ "github.com/nvg-project/nvg/nvgkit/gradcheck" // GradCheck's float64 host reference
	"github.com/nvg-project/nvg/nvgkit/session"
)

// NewLab returns the in-process Lab a session server serves (train.NewLab with its phase
// log on stderr, which is the session's log file when the server was spawned); GradCheck's
// host reference is linked in.
func NewLab() (session.Lab, error) {
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	return train.NewLab(train.LabLog(logger.Printf))
}

// Run serves a new in-process Lab as session name (`nvg session serve NAME`).
func Run(name string, cfg Config) error {
	lab, err := NewLab()
	if err != nil {
		return err
	}
	return Serve(name, lab, cfg)
}
