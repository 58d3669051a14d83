// Package diskspace reports the free space of a file system, so that a large file (a
// teacher's hidden-state cache) is refused before the work that fills it rather than when
// the disk runs out.
package diskspace

// Available returns the bytes an unprivileged process may still write on the file system
// holding dir (statfs: available blocks × block size). ok is false where the platform does
// not report it; err is statfs's error (dir missing, not readable).
func Available(dir string) (bytes int64, ok bool, err error) { return available(dir) }
