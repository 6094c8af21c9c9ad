package httpapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/provider/internal/boot"
)

// smallBuffers accepts connections with a small send buffer, so that a client that reads
// nothing blocks the server's writes after kilobytes rather than megabytes.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		err = c.(*net.TCPConn).SetWriteBuffer(8 << 10)
	}

	return c, err
}

// serveDeadlines serves s on loopback until the test ends and returns its address.
func serveDeadlines(t *testing.T, s *Server) string {
	t.Helper()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- s.Serve(ctx, smallBuffers{lis}) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	return lis.Addr().String()
}

// dialSmall connects with a receive buffer of rcvbuf bytes: small, for the same reason,
// or bounded, so that a slow reader's pace is the server's.
func dialSmall(t *testing.T, addr string, rcvbuf int) net.Conn {
	t.Helper()

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
		}); err != nil {
			return err
		}

		return serr
	}}

	c, err := d.DialContext(t.Context(), "tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	return c
}

// readAll reads c until it ends or 10 s pass, pausing after each read, and returns
// how much came and how it ended.
func readAll(c net.Conn, pause time.Duration) (int64, error) {
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return 0, err
	}

	var total int64

	buf := make([]byte, 256<<10)

	for {
		n, err := c.Read(buf)
		total += int64(n)

		if err != nil {
			return total, err
		}

		time.Sleep(pause)
	}
}

// deadlineServer serves a big EFI binary and a big agent initramfs.
func deadlineServer(t *testing.T, size int64) *Server {
	t.Helper()

	dir := t.TempDir()

	for name, n := range map[string]int64{"big.efi": size, "vmlinuz-amd64": 1, "initramfs-amd64.xz": size} {
		f, err := os.Create(filepath.Join(dir, name))
		require.NoError(t, err)
		require.NoError(t, f.Truncate(n)) // sparse: no disk spent
		require.NoError(t, f.Close())
	}

	assets, err := boot.LoadAgentAssets(dir)
	require.NoError(t, err)

	return New(Options{
		Scripts:   &boot.Scripts{Assets: assets},
		BootFiles: map[string]string{"big.efi": filepath.Join(dir, "big.efi")},
		Registry:  prometheus.NewRegistry(), Logger: zaptest.NewLogger(t),
	})
}

// TestAssetWriteDeadline: a client that asks for a boot asset and reads nothing has its
// connection closed once the asset's write deadline passes; one that reads slowly, but
// reads, gets it whole however long it takes.
func TestAssetWriteDeadline(t *testing.T) {
	t.Parallel()

	const size = 32 << 20

	for _, path := range []string{"/boot/big.efi", "/assets/agent/initramfs-amd64.xz"} {
		t.Run("silent "+path, func(t *testing.T) {
			t.Parallel()

			s := deadlineServer(t, size)
			s.assetStall = 300 * time.Millisecond
			c := dialSmall(t, serveDeadlines(t, s), 4<<10)

			_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: anvil\r\n\r\n", path)
			require.NoError(t, err)

			// The server fills the buffers, then its write waits out the deadline.
			time.Sleep(2 * time.Second)

			got, err := readAll(c, 0)
			require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the connection is still open after %d bytes", got)
			assert.Less(t, got, int64(size), "the whole asset was sent: no write deadline")
		})
	}

	t.Run("slow reader", func(t *testing.T) {
		t.Parallel()

		const slowSize = 8 << 20

		// At most 64 KiB every 25 ms: a megabyte every ~400 ms under a deadline of 1 s a
		// megabyte, more than 3 s in all.
		s := deadlineServer(t, slowSize)
		s.assetStall = time.Second
		c := dialSmall(t, serveDeadlines(t, s), 64<<10)

		_, err := io.WriteString(c, "GET /boot/big.efi HTTP/1.1\r\nHost: anvil\r\nConnection: close\r\n\r\n")
		require.NoError(t, err)

		start := time.Now()
		got, err := readAll(c, 25*time.Millisecond)
		require.ErrorIs(t, err, io.EOF)
		assert.Greater(t, got, int64(slowSize), "the asset and its headers")
		assert.Greater(t, time.Since(start), 2*s.assetStall, "read slower than one deadline")
	})
}

// TestWriteTimeout: the small routes' responses are bounded by the server's
// WriteTimeout: a client that pipelines requests and reads no answer is cut off.
func TestWriteTimeout(t *testing.T) {
	t.Parallel()

	s := deadlineServer(t, 1)
	s.writeTimeout = 300 * time.Millisecond
	c := dialSmall(t, serveDeadlines(t, s), 4<<10)

	const requests = 2000

	go func() {
		w := bufio.NewWriter(c)
		for range requests {
			_, _ = io.WriteString(w, "GET /no/such/route HTTP/1.1\r\nHost: anvil\r\n\r\n")
		}

		_ = w.Flush()
	}()

	time.Sleep(2 * time.Second)

	resp := 0
	r := bufio.NewReader(c)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))

	for {
		line, err := r.ReadString('\n')
		if err != nil {
			require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the connection is still open after %d answers", resp)

			break
		}

		if strings.HasPrefix(line, "HTTP/1.1 404") {
			resp++
		}
	}

	assert.Less(t, resp, requests, "every answer was written: no write timeout")
	assert.Positive(t, resp)
}

var _ http.ResponseWriter = (*progressWriter)(nil)
