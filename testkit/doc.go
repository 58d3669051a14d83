// Package testkit is the room of nvg's test helpers (tinytest: fixtures from the embedded
// tiny teacher; kittest: the nets nvgkit's and nvgkit/train's GPU tests share; blrtest:
// random BLR weights for the gpu and host tests; jsontest: JSON files of tests, importable by
// arch's and cmf's own tests), which
// production code never imports, and of the test that keeps the layering of DESIGN.md §2
// (TestLayering).
package testkit
