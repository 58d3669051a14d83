//go:build linux

// Package ptytest gives tests a pseudo-terminal, to check what a progress display draws on
// a terminal (nvgkit/ui's text form, nvgkit/train's bar).
package ptytest

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// Open returns a new pseudo-terminal's master and slave ends (the slave is what a program
// writes to as its terminal). Errors: no /dev/ptmx, or the ioctls fail.
func Open() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var n uint32
	var unlock int32
	fd := master.Fd()
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		master.Close()
		return nil, nil, e
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		master.Close()
		return nil, nil, e
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// ReadUntil reads master until what it read contains end, the slave side is closed, or 5 s
// pass, and returns what it read.
func ReadUntil(master *os.File, end string) string {
	var got bytes.Buffer
	buf := make([]byte, 4096)
	master.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		n, err := master.Read(buf)
		got.Write(buf[:n])
		if err != nil || strings.Contains(got.String(), end) {
			return got.String()
		}
	}
}
