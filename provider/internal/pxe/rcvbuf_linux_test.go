package pxe

import (
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The receive buffer is what was asked for, past rmem_max, with CAP_NET_ADMIN; without
// it, it is what SO_RCVBUF allows, and not an error.
func TestSetReadBuffer(t *testing.T) {
	t.Parallel()

	// Above the default rmem_max (~208 KiB), so a capped buffer shows.
	const size = 8 << 20

	rmemMax := readRmemMax()

	for _, tc := range []struct {
		name    string
		dropCap bool
		want    func(t *testing.T, got int)
	}{
		{
			name: "CAP_NET_ADMIN: all of it",
			want: func(t *testing.T, got int) {
				// Linux reports double what it set; at least size in any case.
				assert.GreaterOrEqual(t, got, size)
				assert.Equal(t, 2*size, got)
			},
		},
		{
			name:    "without CAP_NET_ADMIN: capped at rmem_max",
			dropCap: true,
			want: func(t *testing.T, got int) {
				if rmemMax > 0 {
					assert.Equal(t, 2*min(size, rmemMax), got)
				}

				assert.Positive(t, got)
				assert.LessOrEqual(t, got, 2*size)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.dropCap && !hasNetAdmin(t) {
				t.Skip("needs CAP_NET_ADMIN (run as root)")
			}

			type result struct {
				got int
				err error
			}

			done := make(chan result, 1)

			// Capabilities belong to a thread: drop CAP_NET_ADMIN on one locked to this
			// goroutine, which is never unlocked so the thread ends with it.
			go func() {
				runtime.LockOSThread()

				if tc.dropCap {
					if err := dropNetAdmin(); err != nil {
						done <- result{err: err}

						return
					}
				}

				conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
				if err != nil {
					done <- result{err: err}

					return
				}

				defer conn.Close()

				got, err := setReadBuffer(conn, size)
				done <- result{got: got, err: err}
			}()

			select {
			case r := <-done:
				require.NoError(t, r.err)
				tc.want(t, r.got)
			case <-time.After(10 * time.Second):
				t.Fatal("sizing a receive buffer did not return")
			}
		})
	}
}

// The DHCP sockets get the buffer too.
func TestListenUDPReadBuffer(t *testing.T) {
	t.Parallel()

	if !hasNetAdmin(t) {
		t.Skip("needs CAP_NET_ADMIN (run as root)")
	}

	conn, err := listenUDP(t.Context(), "", 0)
	require.NoError(t, err)

	defer conn.Close()

	rc, err := conn.SyscallConn()
	require.NoError(t, err)

	var (
		got  int
		gerr error
	)

	require.NoError(t, rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }))
	require.NoError(t, gerr)
	assert.Equal(t, 2*readBuffer, got)
}

// hasNetAdmin says whether this thread (so, unless a test dropped it, the process) has
// CAP_NET_ADMIN in effect: what SO_RCVBUFFORCE asks for, rather than being root.
func hasNetAdmin(t *testing.T) bool {
	t.Helper()

	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}

	var data [2]unix.CapUserData

	require.NoError(t, unix.Capget(&hdr, &data[0]))

	return data[unix.CAP_NET_ADMIN/32].Effective&(1<<(unix.CAP_NET_ADMIN%32)) != 0
}

// dropNetAdmin takes CAP_NET_ADMIN out of the calling thread's effective set.
func dropNetAdmin() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}

	var data [2]unix.CapUserData

	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}

	data[unix.CAP_NET_ADMIN/32].Effective &^= 1 << (unix.CAP_NET_ADMIN % 32)

	return unix.Capset(&hdr, &data[0])
}

// readRmemMax is net.core.rmem_max, or 0 when it cannot be read (then the fallback's
// exact size is not checked, only its bounds).
func readRmemMax() int {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		return 0
	}

	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}

	return n
}
