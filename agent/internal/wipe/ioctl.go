package wipe

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func ioctl(fd, req, arg uintptr) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, req, arg); errno != 0 {
		return errno
	}

	return nil
}

func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }
