// Package ui draws nvg's charts and shows them, and long calls' progress, in GoNB notebook
// cells (DESIGN.md §2). It is light: it takes plain data (slices, small structs such as
// TrainingCurves, TensorPoint, MemSample, session.Progress) and imports gonum/plot and GoNB's
// gonbui but no GPU engine, nvgkit or cgo, so a notebook cell that only talks to a resident
// session (nvgkit/session) and draws with ui compiles and starts in a fraction of a second
// (TestLightDeps keeps it so).
//
// Charts: PlotTraining (loss with its moving average, held-out perplexity on a log axis,
// the teacher's as a dashed line), PlotLayerGradNorms, PlotHistogram, PlotTopK,
// PlotReconstruction, PlotMemLog, PlotSignFlips (signs flipped per layer per step, from a
// run's metrics or a session's History: PlotHistorySignFlips); a Chart keeps its legend
// beside the data. Output:
// RenderPNG, RenderSVG, SavePlot (atomic), DisplayPNG/DisplaySVG and Show in a notebook.
// Progress: NotebookProgress (a bar, a train.Progress) and Live (a progress line and a
// training curve redrawn while a call runs, fed session.Progress values, e.g. from a Lab
// call's OnProgress option). Must and Check are the notebook idiom for stopping a cell at an
// error.
//
// Outside a notebook (GoNB not detected: a cell run with `go run`, a script) Show,
// NotebookProgress and Live print a text form to standard output instead of nothing: a
// progress bar redrawn in place on a terminal or throttled lines elsewhere, and plots saved
// as PNG files in PlotDir ($NVG_PLOT_DIR, else nvg-plots in the temporary directory) with
// their paths.
package ui
