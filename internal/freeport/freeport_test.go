package freeport_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/freeport"
)

func TestPortsAreFreeAndNeverRepeat(t *testing.T) {
	t.Parallel()

	seen := map[int]bool{}

	for i := range 200 {
		pick, listen := freeport.TCP, func(p int) (func() error, error) {
			l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				return nil, err
			}

			return l.Close, nil
		}
		if i%2 == 1 {
			pick, listen = freeport.UDP, func(p int) (func() error, error) {
				c, err := net.ListenPacket("udp4", "127.0.0.1:"+strconv.Itoa(p))
				if err != nil {
					return nil, err
				}

				return c.Close, nil
			}
		}

		port, err := pick()
		require.NoError(t, err)
		assert.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true

		// Below the kernel's ephemeral range, and bindable.
		assert.Less(t, port, 32768)

		closeFn, err := listen(port)
		require.NoError(t, err, "port %d", port)
		require.NoError(t, closeFn())
	}
}

func TestBusyPortIsSkipped(t *testing.T) {
	t.Parallel()

	// Whatever is bound stays bound: a port handed out is never one in use.
	var held []net.Listener

	t.Cleanup(func() {
		for _, l := range held {
			l.Close()
		}
	})

	for range 50 {
		port, err := freeport.TCP()
		require.NoError(t, err)

		l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(port))
		require.NoError(t, err, "port %d was handed out but is busy", port)

		held = append(held, l)
	}
}
