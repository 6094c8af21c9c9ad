package wipe

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func ioctl(fd, req, arg uintptr) error {
	_, err := ioctlRet(fd, req, arg)

	return err
}

// ioctlRet also returns what the ioctl returned: the NVMe passthrough ioctls return the
// command's status there (positive) when the device failed it.
func ioctlRet(fd, req, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, req, arg)
	if errno != 0 {
		return 0, errno
	}

	return r, nil
}

func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) } //nolint:gosec // G103: the ioctls' arguments
