package tftpbench

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/tftp"
)

func TestLoad(t *testing.T) {
	t.Parallel()

	file := bytes.Repeat([]byte("anvil"), 20000)

	srv, err := tftp.NewServer(tftp.Config{
		Open: func(_ context.Context, req *tftp.Request, _ netip.AddrPort) (io.ReaderAt, int64, error) {
			if req.Filename != "ipxe.efi" {
				return nil, 0, tftp.ErrNotFound
			}

			return bytes.NewReader(file), int64(len(file)), nil
		},
		// All the clients are one address, and a finished transfer holds its slot until the
		// server has read the last ACK, which can come after that client's next request: the
		// cap is not under test here (the bench's provider gets the same room).
		MaxTransfersPerClient: 1000,
	})
	require.NoError(t, err)

	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- srv.Serve(ctx, conn) }()

	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})

	for _, tc := range []struct {
		name         string
		file         string
		size         int64
		window       int
		wantFailures int
	}{
		{"lock step", "ipxe.efi", int64(len(file)), 0, 0},
		{"windows", "ipxe.efi", int64(len(file)), 8, 0},
		{"wrong size", "ipxe.efi", 5, 8, 6},
		{"missing", "missing.efi", 5, 0, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Load(t.Context(), LoadConfig{
				Addr: conn.LocalAddr().String(), File: tc.file, Size: tc.size,
				Concurrency: 3, Transfers: 2, BlockSize: 1468, WindowSize: tc.window, Timeout: time.Second,
			})
			require.NoError(t, err)
			assert.Equal(t, 6, res.Transfers)
			assert.Equal(t, tc.wantFailures, res.Failures, res.FirstErr)

			if tc.wantFailures == 0 {
				assert.Equal(t, 6*int64(len(file)), res.Bytes)
				assert.Positive(t, res.MBps())
				assert.Equal(t, max(tc.window, 1), res.WindowSize)
			} else {
				assert.NotEmpty(t, res.FirstErr)
			}
		})
	}
}

func TestServerFigures(t *testing.T) {
	t.Parallel()

	s := Server{
		Trials: []LoadResult{
			{Bytes: 10e6, Elapsed: time.Second},
			{Bytes: 30e6, Elapsed: time.Second},
			{Bytes: 20e6, Elapsed: time.Second},
		},
		CPU: []time.Duration{100 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond},
	}

	assert.InDelta(t, 20, s.Median().MBps(), 1e-9)
	// 10, 5 and 20 ms per MB: the median is 10.
	assert.InDelta(t, 10, s.CPUPerMB(), 1e-9)
	assert.Zero(t, Server{}.Median().MBps())
	assert.Zero(t, Server{}.CPUPerMB())
}
