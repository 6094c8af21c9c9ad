package portmux

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeekedConnReadFrom: a delivered connection keeps its ReadFrom (sendfile for a file
// on TCP) and the body arrives whole, after the peeked bytes are still read first; a
// connection without ReadFrom gets a plain copy.
func TestPeekedConnReadFrom(t *testing.T) {
	t.Parallel()

	body := bytes.Repeat([]byte("anvil boot asset "), 64<<10) // ~1 MiB

	path := filepath.Join(t.TempDir(), "asset")
	require.NoError(t, os.WriteFile(path, body, 0o644))

	tcpPair := func(t *testing.T) (server, client net.Conn) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)

		defer lis.Close()

		client, err = net.Dial("tcp", lis.Addr().String())
		require.NoError(t, err)

		server, err = lis.Accept()
		require.NoError(t, err)

		return server, client
	}

	pipePair := func(*testing.T) (server, client net.Conn) { return net.Pipe() }

	for _, tc := range []struct {
		name string
		pair func(*testing.T) (net.Conn, net.Conn)
	}{
		{"tcp", tcpPair},
		{"pipe", pipePair},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			server, client := tc.pair(t)

			t.Cleanup(func() {
				server.Close()
				client.Close()
			})

			got := make(chan []byte, 1)

			go func() {
				_, _ = client.Write([]byte("G"))
				b, _ := io.ReadAll(client)
				got <- b
			}()

			r := bufio.NewReaderSize(server, 512)
			_, err := r.Peek(1)
			require.NoError(t, err)

			var conn net.Conn = &peekedConn{Conn: server, r: r}

			first := make([]byte, 1)
			_, err = io.ReadFull(conn, first)
			require.NoError(t, err)
			assert.Equal(t, "G", string(first), "the peeked byte is read first")

			rf, ok := conn.(io.ReaderFrom)
			require.True(t, ok, "net/http needs ReadFrom to use sendfile")

			f, err := os.Open(path)
			require.NoError(t, err)

			defer f.Close()

			n, err := rf.ReadFrom(f)
			require.NoError(t, err)
			assert.Equal(t, int64(len(body)), n)
			require.NoError(t, server.Close())

			assert.Equal(t, body, <-got)
		})
	}
}
