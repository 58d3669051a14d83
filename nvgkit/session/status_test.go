package session

import "testing"

// TestServerStatusState: the state and problem nvg session ls shows for each kind of server,
// the one not answering before one not asked, a busy one with its method.
func TestServerStatusState(t *testing.T) {
	for _, tc := range []struct {
		s              ServerStatus
		state, problem string
	}{
		{ServerStatus{Name: "a", Pid: 1}, "dead", ""},
		{ServerStatus{Name: "a", Pid: 1, Err: "stale"}, "dead", ""},
		{ServerStatus{Name: "a", Pid: 2, Alive: true, NotAnswering: true, Err: "no answer within 3s"}, "NOT ANSWERING", "a (pid 2) does not answer: no answer within 3s"},
		{ServerStatus{Name: "b", Pid: 3, Alive: true, Err: "permission denied"}, "alive (not asked)", "b (pid 3): permission denied"},
		{ServerStatus{Name: "c", Pid: 4, Alive: true, Busy: "Step"}, "busy (Step)", ""},
		{ServerStatus{Name: "d", Pid: 5, Alive: true}, "alive", ""},
	} {
		if got, p := tc.s.State(), tc.s.Problem(); got != tc.state || p != tc.problem {
			t.Errorf("%+v: state %q, problem %q; want %q, %q", tc.s, got, p, tc.state, tc.problem)
		}
	}
}
