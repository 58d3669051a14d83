package ui

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"path/filepath"
	"strings"
	"time"

	"github.com/janpfeifer/gonb/gonbui"
	"github.com/nvg-project/nvg/internal/atomicfile"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// PlotDPI is the resolution at which the plot helpers turn pixel sizes into gonum/plot
// lengths: a w×h-pixel figure is drawn on a (w·72/PlotDPI)×(h·72/PlotDPI)-point canvas,
// so fonts and line widths look the same in PNG and SVG output.
const PlotDPI = 96

// Plot size limits of the render helpers, in pixels.
const (
	minPlotPixels = 16
	maxPlotPixels = 16384
)

// ErrNotNotebook is returned by DisplayPNG and DisplaySVG when the program was not started
// by a GoNB kernel (gonbui.IsNotebook is false); nothing is displayed then.
var ErrNotNotebook = errors.New("ui: not running in a GoNB notebook (gonbui.IsNotebook is false): nothing displayed")

// Drawable is anything that draws itself on a gonum/plot canvas: a *plot.Plot, a *Chart or
// a *Figure. The render, save and display helpers take one.
type Drawable interface {
	Draw(c draw.Canvas)
}

// Figure is several plots stacked vertically in panels of equal height, their data areas
// aligned (plot.Align), for plots that share an X axis (PlotTraining). It implements
// Drawable.
type Figure struct {
	Panels []*plot.Plot
}

// Draw draws the panels top to bottom on c. A Figure without panels draws nothing.
func (f *Figure) Draw(c draw.Canvas) {
	if f == nil || len(f.Panels) == 0 {
		return
	}
	rows := make([][]*plot.Plot, len(f.Panels))
	for i, p := range f.Panels {
		rows[i] = []*plot.Plot{p}
	}
	cs := plot.Align(rows, draw.Tiles{Rows: len(f.Panels), Cols: 1, PadY: vg.Points(6), PadTop: vg.Points(2), PadBottom: vg.Points(2)}, c)
	for i, p := range f.Panels {
		p.Draw(cs[i][0])
	}
}

func checkPlotSize(d Drawable, w, h int) error {
	if d == nil {
		return errors.New("ui: nil plot")
	}
	if p, ok := d.(*plot.Plot); ok && p == nil {
		return errors.New("ui: nil plot")
	}
	if c, ok := d.(*Chart); ok && (c == nil || c.Plot == nil) {
		return errors.New("ui: nil plot")
	}
	if f, ok := d.(*Figure); ok && (f == nil || len(f.Panels) == 0) {
		return errors.New("ui: figure has no panels")
	}
	if w < minPlotPixels || h < minPlotPixels || w > maxPlotPixels || h > maxPlotPixels {
		return fmt.Errorf("ui: plot size %d×%d pixels is outside [%d, %d] per side", w, h, minPlotPixels, maxPlotPixels)
	}
	return nil
}

// pixels converts a pixel count to a gonum/plot length at PlotDPI.
func pixels(n int) vg.Length { return vg.Length(n) * vg.Inch / PlotDPI }

// drawSafely runs d.Draw, turning a gonum/plot panic (for example a data range it cannot
// draw) into an error.
func drawSafely(d Drawable, c draw.Canvas) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("ui: drawing the plot failed: %v", r)
		}
	}()
	d.Draw(draw.Crop(c, plotMargin, -plotMargin, plotMargin, -plotMargin))
	return nil
}

// plotMargin is the blank border left around every rendered plot, so that titles and
// tick labels never touch the image edge.
const plotMargin = 6 * vg.Millimeter / 4

// RenderPNG draws d on a white w×h-pixel canvas (PlotDPI) and returns the PNG file bytes;
// the decoded image is exactly w×h. Errors: a nil d, a Figure without panels, a side
// outside [16, 16384] pixels, a drawing or encoding failure.
func RenderPNG(d Drawable, w, h int) ([]byte, error) {
	if err := checkPlotSize(d, w, h); err != nil {
		return nil, err
	}
	c := vgimg.NewWith(vgimg.UseWH(pixels(w), pixels(h)), vgimg.UseDPI(PlotDPI), vgimg.UseBackgroundColor(color.White))
	if err := drawSafely(d, draw.New(c)); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("ui: encoding PNG: %w", err)
	}
	return buf.Bytes(), nil
}

// RenderSVG draws d on a w×h-pixel canvas and returns the SVG document; its width and
// height attributes are in points (w·72/PlotDPI by h·72/PlotDPI), which browsers show at
// w×h CSS pixels. Errors as RenderPNG.
func RenderSVG(d Drawable, w, h int) ([]byte, error) {
	if err := checkPlotSize(d, w, h); err != nil {
		return nil, err
	}
	c := vgsvg.New(pixels(w), pixels(h))
	if err := drawSafely(d, draw.New(c)); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("ui: encoding SVG: %w", err)
	}
	return buf.Bytes(), nil
}

// SavePlot renders d at w×h pixels to path, as PNG or SVG by the file extension (.png or
// .svg, any case), atomically: a temporary file in the same directory is written, fsynced
// and renamed over path, so a reader never sees a partial image and on error the previous
// file is untouched. Errors: another extension, RenderPNG/RenderSVG errors, I/O errors
// naming path.
func SavePlot(path string, d Drawable, w, h int) error {
	var data []byte
	var err error
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png":
		data, err = RenderPNG(d, w, h)
	case ".svg":
		data, err = RenderSVG(d, w, h)
	default:
		return fmt.Errorf("ui: save plot %s: extension %q, want .png or .svg", path, ext)
	}
	if err != nil {
		return fmt.Errorf("save plot %s: %w", path, err)
	}
	if err := atomicfile.WriteBytes(path, data); err != nil {
		return fmt.Errorf("nvgkit: save plot: %w", err)
	}
	return nil
}

// DisplayPNG renders d at w×h pixels and shows it inline in the GoNB notebook cell's
// output (gonbui.DisplayPng). Outside a notebook it renders nothing and returns
// ErrNotNotebook. Errors: RenderPNG's, or the notebook connection's (gonbui.Error).
func DisplayPNG(d Drawable, w, h int) error {
	if !gonbui.IsNotebook {
		return ErrNotNotebook
	}
	data, err := RenderPNG(d, w, h)
	if err != nil {
		return err
	}
	gonbui.DisplayPng(data)
	return syncNotebook()
}

// syncNotebook waits until the kernel has taken what the cell sent (gonbui.Sync) and a
// little longer: an image sent just before a cell's program exits was once lost without the
// pause. It returns the notebook connection's error.
func syncNotebook() error {
	gonbui.Sync()
	time.Sleep(300 * time.Millisecond)
	return gonbui.Error()
}

// Show displays d as a w×h-pixel PNG in the notebook cell's output (DisplayPNG) and panics
// on an error: the notebook form of DisplayPNG, where a cell should stop at a failure
// rather than go on with missing output. Outside a notebook (a cell run with `go run`) it
// saves the PNG in PlotDir and prints "plot: PATH (W×H)" to standard output instead.
func Show(d Drawable, w, h int) {
	var err error
	if notebook() {
		err = displayPNG(d, w, h)
	} else {
		_, err = savePlotFile("plot", d, w, h)
	}
	if err != nil {
		panic(err)
	}
}

// displayPNG is DisplayPNG (tests replace it).
var displayPNG = DisplayPNG

// Must returns v, or panics with err when it is not nil: for notebook cells, where a failed
// call should stop the cell with its message (GoNB shows a panic's value), as
// template.Must does for templates. Library code returns errors instead.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Must2 is Must for calls that return two values and an error.
func Must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

// Check panics with err when it is not nil: Must for calls that return only an error.
func Check(err error) {
	if err != nil {
		panic(err)
	}
}

// DisplaySVG renders d as SVG at w×h pixels and shows it inline in the GoNB notebook
// (gonbui.DisplaySvg, which embeds the SVG in HTML so that exported notebooks keep it).
// Outside a notebook it returns ErrNotNotebook. Errors as DisplayPNG.
func DisplaySVG(d Drawable, w, h int) error {
	if !gonbui.IsNotebook {
		return ErrNotNotebook
	}
	data, err := RenderSVG(d, w, h)
	if err != nil {
		return err
	}
	gonbui.DisplaySvg(string(data))
	return syncNotebook()
}
