// Package ioctl calls the block-device ioctls the agent's disk code needs (discard,
// SG_IO, NVMe passthrough) with the argument handling the runtime asks for.
package ioctl

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ptr calls the ioctl with a pointer argument. The pointer becomes a uintptr in the
// Syscall call itself, which is the one place the runtime keeps what it points to alive
// and in place until the call returns. Memory that arg's struct points to in turn (SG_IO
// buffers, NVMe data) the caller pins (runtime.Pinner): it is out of the runtime's sight.
//
// It also returns what the ioctl returned: the NVMe passthrough ioctls return the
// command's status there (positive) when the device failed it.
func Ptr(fd, req uintptr, arg unsafe.Pointer) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(arg))
	if errno != 0 {
		return 0, errno
	}

	return r, nil
}

// Int calls the ioctl with an integer argument.
func Int(fd, req, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, req, arg)
	if errno != 0 {
		return 0, errno
	}

	return r, nil
}

// Pointer is p as an ioctl argument.
func Pointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) } //nolint:gosec // G103: the ioctls' arguments
