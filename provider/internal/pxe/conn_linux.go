package pxe

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// listenUDP binds 0.0.0.0:port on one interface. 0.0.0.0 because DHCP requests arrive
// broadcast; SO_BINDTODEVICE keeps us to the interface (and sends our broadcasts out of
// it); SO_REUSEADDR lets us share the port with another DHCP server in the same network
// namespace; SO_BROADCAST allows replies to 255.255.255.255.
func listenUDP(ctx context.Context, ifname string, port int) (*net.UDPConn, error) {
	lc := net.ListenConfig{
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error

			err := rc.Control(func(fd uintptr) {
				if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); serr != nil {
					serr = fmt.Errorf("error setting SO_REUSEADDR: %w", serr)

					return
				}

				if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1); serr != nil {
					serr = fmt.Errorf("error setting SO_BROADCAST: %w", serr)

					return
				}

				if ifname != "" {
					if serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, ifname); serr != nil {
						serr = fmt.Errorf("error binding to device %s: %w", ifname, serr)
					}
				}
			})
			if err != nil {
				return err
			}

			return serr
		},
	}

	pc, err := lc.ListenPacket(ctx, "udp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("error binding %s UDP port %d: %w", ifname, port, err)
	}

	conn := pc.(*net.UDPConn) //nolint:forcetypeassert // what ListenPacket returns for "udp4"

	// A burst of PXE clients (a rack powering on) must queue, not drop, while the
	// readers catch up. (What the socket got is not logged: there is no logger here.)
	if _, err = setReadBuffer(conn, readBuffer); err != nil {
		conn.Close()

		return nil, fmt.Errorf("error sizing the receive buffer of UDP port %d: %w", port, err)
	}

	return conn, nil
}
