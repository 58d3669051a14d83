package session

import "fmt"

// State is s's state as `nvg session ls` shows it: "dead" (the server died), "NOT ANSWERING"
// (alive but silent: NotAnswering), "alive (not asked)" (alive, its status not read: Err),
// "busy (METHOD)" (a call runs) or "alive".
func (s ServerStatus) State() string {
	switch {
	case !s.Alive:
		return "dead"
	case s.NotAnswering:
		return "NOT ANSWERING"
	case s.Err != "":
		return "alive (not asked)"
	case s.Busy != "":
		return "busy (" + s.Busy + ")"
	}
	return "alive"
}

// Problem says what is wrong with a live server whose status could not be read, with what to
// do (its Err): "NAME (pid P) does not answer: …" or "NAME (pid P): …"; "" for any other.
func (s ServerStatus) Problem() string {
	switch {
	case !s.Alive || s.Err == "":
		return ""
	case s.NotAnswering:
		return fmt.Sprintf("%s (pid %d) does not answer: %s", s.Name, s.Pid, s.Err)
	}
	return fmt.Sprintf("%s (pid %d): %s", s.Name, s.Pid, s.Err)
}
