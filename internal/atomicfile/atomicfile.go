// Package atomicfile writes files atomically: a reader of the path sees either the old file
// or the complete new one, never a part, and after a crash the new file is either whole or
// absent. Every output nvg writes (models, checkpoints, reports, plots, token streams, run
// settings) goes through Write.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// Mode is the permission bits of every file Write makes: 0644, set with chmod so that the
// process umask does not narrow it (and an old file's mode is not kept).
const Mode os.FileMode = 0o644

// Write writes the file path with the content fill writes to w. w buffers (1 MiB) a
// temporary file ".<base>.tmp-<random>" in path's directory; after fill returns, Write
// flushes it, sets Mode, fsyncs and closes it, renames it over path and fsyncs the
// directory, so that the rename itself survives a crash.
//
// On any error (fill's included) the temporary file is removed and path is left as it was,
// except that a failed directory sync comes after the rename. The error reads
// "write <path>: <cause>" and wraps the cause. A file system that cannot sync a directory
// (EINVAL), and Windows, where directories cannot be synced, are not errors.
func Write(path string, fill func(w io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if err != nil {
			if !renamed {
				f.Close()
				os.Remove(tmp)
			}
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err = fill(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = f.Chmod(Mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	renamed = true
	return SyncDir(dir)
}

// WriteBytes is Write with content data.
func WriteBytes(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// SyncDir fsyncs directory dir, which makes the creation, rename and removal of its entries
// durable. A file system that cannot sync a directory (EINVAL) and Windows are not errors;
// other errors read "fsync <dir>: <cause>".
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" { // directories cannot be fsynced there; rename is durable enough
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
