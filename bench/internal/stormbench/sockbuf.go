package stormbench

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// growReceiveBuffer gives the UDP sockets process pid has bound to port a receive buffer
// of size bytes (SO_RCVBUFFORCE on a copy of its descriptor, pidfd_getfd(2)). dnsmasq
// has no option for it, and the kernel's default (rmem_default, 208 KiB) holds about a
// hundred DISCOVERs: a site's DHCP server for a thousand machines is given more.
func growReceiveBuffer(pid, port, size int) error {
	inodes, err := udpInodes(pid, port)
	if err != nil {
		return err
	}

	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("error opening process %d: %w", pid, err)
	}

	defer unix.Close(pidfd)

	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return fmt.Errorf("error listing the descriptors of process %d: %w", pid, err)
	}

	grown := 0

	for _, e := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if err != nil || !inodes[target] {
			continue
		}

		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}

		fd, err := unix.PidfdGetfd(pidfd, n, 0)
		if err != nil {
			return fmt.Errorf("error copying descriptor %d of process %d: %w", n, pid, err)
		}

		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size)
		unix.Close(fd)

		if err != nil {
			return fmt.Errorf("error growing the receive buffer of process %d: %w", pid, err)
		}

		grown++
	}

	if grown == 0 {
		return fmt.Errorf("process %d has no UDP socket on port %d", pid, port)
	}

	return nil
}

// udpInodes reads the socket inodes ("socket:[N]") of the UDP sockets bound to port in
// process pid's network namespace.
func udpInodes(pid, port int) (map[string]bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/udp", pid))
	if err != nil {
		return nil, fmt.Errorf("error reading the UDP sockets of process %d: %w", pid, err)
	}

	suffix := fmt.Sprintf(":%04X", port)
	inodes := map[string]bool{}

	for line := range strings.SplitSeq(string(b), "\n") {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) > 9 && strings.HasSuffix(f[1], suffix) {
			inodes["socket:["+f[9]+"]"] = true
		}
	}

	return inodes, nil
}
