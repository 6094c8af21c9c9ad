package tftp

import (
	"net"

	"golang.org/x/sys/unix"
)

// maxBatch bounds the DATA packets of one write: a window of 16 blocks of 1468 bytes is
// one write, and a transfer's buffer stays small.
const maxBatch = 16

// segmentation turns on UDP segmentation offload (UDP_SEGMENT) on a transfer's socket
// for DATA packets of size bytes and returns how many of them one write may carry, or 1
// when the kernel does not offer it. A write the route's device then cannot segment
// fails, and the sender falls back to a packet per write.
func segmentation(c *net.UDPConn, size, window int) int {
	// 65507 is the most a UDP datagram carries: the kernel's bound on the write.
	n := min(window, maxBatch, 65507/size)
	if n < 2 {
		return 1
	}

	rc, err := c.SyscallConn()
	if err != nil {
		return 1
	}

	var serr error

	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, size)
	}); err != nil || serr != nil {
		return 1
	}

	return n
}
