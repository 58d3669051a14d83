//go:build !linux

package gpu

import "errors"

// vkLayer is the Vulkan layer's library; nvg builds and loads it on Linux only (loadLayer
// turns tensor cores off elsewhere), so on other systems it is never made.
type vkLayer struct{ path string }

var errNoLayer = errors.New("nvg's Vulkan layer is built for Linux only")

func openLayer(string) (*vkLayer, error)                      { return nil, errNoLayer }
func (l *vkLayer) setArmed(bool)                              {}
func (l *vkLayer) registerSPIRV(string, []uint32, bool) error { return errNoLayer }
func (l *vkLayer) swapCount(string) int                       { return 0 }
func (l *vkLayer) state() (layerState, error)                 { return layerState{}, errNoLayer }
