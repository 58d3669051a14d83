package session_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nvg-project/nvg/nvgkit/session"
	"github.com/nvg-project/nvg/nvgkit/ui"
	"github.com/nvg-project/nvg/testkit/readmetest"
)

// Example_notebook is the session workflow of README.md's "In a notebook" section, whose
// code block is this function's body (TestReadmeSessionSnippetIsExample keeps them equal):
// each commented block is one GoNB cell, a new process attaching to the resident session
// "readme". It starts a session server on the GPU, so it has no Output comment: the tests
// compile it; the session tests run the same calls against a server.
func Example_notebook() {
	// Cell 1: attach to the session "readme" (started when none runs) and set it up once: the
	// embedded tiny teacher compressed to 1 bit per weight, the teacher pass over the training
	// windows. Running the cell again is a no-op.
	lab := ui.Must(session.Attach("readme"))
	live := ui.NewLive("setup", 0, 0, 0) // progress streamed into the cell
	info := ui.Must(lab.Setup(session.DefaultSetup(), live.OnProgress()))
	live.Finish("ready")
	fmt.Printf("held-out perplexity: teacher %.2f, compressed student %.2f\n", info.TeacherPPL, info.CompressedPPL)

	// Cell 2, a new process: the same session, one step at a time, looking between the calls.
	lab = ui.Must(session.Attach("readme"))
	ui.Check(lab.ZeroGrads())
	st := ui.Must(lab.ForwardBackward()) // loss and gradients of the next batch
	g := ui.Must(lab.Grad("model.norm.weight"))
	fmt.Printf("step %d: loss %.4f, %d gradient values of the final norm\n", st.Step, st.Loss, len(g))
	norm := ui.Must(lab.ClipGrads(1))
	ui.Must(lab.AdamStep())
	fmt.Printf("gradient norm %.3g before clipping\n", norm)

	// Cell 3: train on with a live loss curve, then plot what the session recorded.
	live = ui.NewLive("train", 0, 0, 0).From(ui.Must(lab.History())) // the curve so far, then live
	ui.Must(lab.Step(10, session.EvalEvery(5), live.OnProgress()))
	live.Finish("10 steps")
	ui.Show(ui.Must(ui.PlotHistory(ui.Must(lab.History()))), 800, 560)

	// Last cell: stop the session (its GPU memory is freed with its process).
	ui.Check(lab.Close())
	ui.Check(session.Stop("readme", time.Minute))
}

// TestReadmeSessionSnippetIsExample: the Go block of README.md's "## In a notebook" section
// is the body of Example_notebook (whitespace-normalised), so the README's code compiles as
// written.
func TestReadmeSessionSnippetIsExample(t *testing.T) {
	readmetest.Check(t, "../../README.md", "## In a notebook", "example_readme_test.go", "Example_notebook")
}
