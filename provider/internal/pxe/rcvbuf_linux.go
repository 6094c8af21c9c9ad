package pxe

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// readBuffer is the receive buffer the DHCP and TFTP sockets ask for: a rack powering on
// sends its requests within a second, and they must queue, not drop, while the readers
// catch up.
const readBuffer = 4 << 20

// setReadBuffer sizes conn's receive buffer to size bytes and returns the SO_RCVBUF the
// kernel reports afterwards. Linux reports double the value set (the rest is its
// bookkeeping), so a socket that got what it asked reports 2*size.
//
// SetReadBuffer (SO_RCVBUF) is silently capped at net.core.rmem_max, ~208 KiB by default;
// SO_RCVBUFFORCE is not, and the provider runs with CAP_NET_ADMIN. Without it (EPERM),
// SO_RCVBUF and the cap it brings are the best there is.
func setReadBuffer(conn syscall.Conn, size int) (int, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("error getting the socket to size its receive buffer: %w", err)
	}

	var (
		got  int
		serr error
	)

	if err = rc.Control(func(fd uintptr) { got, serr = sizeReceiveBuffer(int(fd), size) }); err != nil {
		return 0, fmt.Errorf("error reaching the socket to size its receive buffer: %w", err)
	}

	return got, serr
}

func sizeReceiveBuffer(fd, size int) (int, error) {
	err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size)
	if errors.Is(err, unix.EPERM) {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
	}

	if err != nil {
		return 0, fmt.Errorf("error setting the receive buffer to %d bytes: %w", size, err)
	}

	got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		return 0, fmt.Errorf("error reading the receive buffer size back: %w", err)
	}

	return got, nil
}
