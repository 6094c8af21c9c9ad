package tftp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pintftp "github.com/pin/tftp/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testServer serves files from memory on loopback.
type testServer struct {
	addr  string
	files map[string][]byte

	mu        sync.Mutex
	transfers []Transfer
}

func startServer(t testing.TB, listen string, cfg Config, files map[string][]byte) *testServer {
	t.Helper()

	ts := &testServer{files: files}

	if cfg.Open == nil {
		cfg.Open = func(_ context.Context, req *Request, _ netip.AddrPort) (io.ReaderAt, int64, error) {
			switch req.Filename {
			case "secret":
				return nil, 0, fmt.Errorf("%s: %w", req.Filename, ErrAccess)
			case "broken":
				return nil, 0, errors.New("disk on fire at /srv/tftp/broken")
			}

			b, ok := files[req.Filename]
			if !ok {
				return nil, 0, fmt.Errorf("%s: %w", req.Filename, ErrNotFound)
			}

			return bytes.NewReader(b), int64(len(b)), nil
		}
	}

	cfg.Done = func(tr Transfer) {
		ts.mu.Lock()
		ts.transfers = append(ts.transfers, tr)
		ts.mu.Unlock()
	}

	srv, err := NewServer(cfg)
	require.NoError(t, err)

	ua, err := net.ResolveUDPAddr("udp", listen)
	require.NoError(t, err)

	conn, err := net.ListenUDP("udp", ua)
	require.NoError(t, err)

	ts.addr = conn.LocalAddr().String()

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- srv.Serve(ctx, conn) }()

	t.Cleanup(func() {
		cancel()

		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
	})

	return ts
}

func (ts *testServer) waitTransfers(t *testing.T, n int) []Transfer {
	t.Helper()

	var got []Transfer

	require.Eventually(t, func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()

		got = append([]Transfer(nil), ts.transfers...)

		return len(got) >= n
	}, 10*time.Second, 5*time.Millisecond)

	return got
}

var testFiles = map[string][]byte{
	"ipxe.efi":      randomBytes(850528),
	"undionly.kpxe": randomBytes(74213),
	"whole":         randomBytes(4 * 1468),
	"empty":         {},
}

func TestServerGet(t *testing.T) {
	t.Parallel()

	ts := startServer(t, "127.0.0.1:0", Config{}, testFiles)

	for _, tc := range []struct {
		file      string
		opts      ClientOptions
		wantBlock int
		wantWin   int
	}{
		{"undionly.kpxe", ClientOptions{}, 512, 1},
		{"undionly.kpxe", ClientOptions{BlockSize: 1468, TransferSize: true}, 1468, 1},
		{"ipxe.efi", ClientOptions{BlockSize: 1468, WindowSize: 8, TransferSize: true}, 1468, 8},
		{"ipxe.efi", ClientOptions{BlockSize: 1468, WindowSize: 16}, 1468, 16},
		{"ipxe.efi", ClientOptions{BlockSize: 9000, WindowSize: 1000}, 1468, 64},
		{"whole", ClientOptions{BlockSize: 1468, WindowSize: 4}, 1468, 4},
		{"empty", ClientOptions{WindowSize: 4, TransferSize: true}, 512, 4},
	} {
		t.Run(fmt.Sprintf("%s %+v", tc.file, tc.opts), func(t *testing.T) {
			var buf bytes.Buffer

			res, err := Get(t.Context(), ts.addr, tc.file, tc.opts, &buf)
			require.NoError(t, err)

			want := testFiles[tc.file]
			assert.True(t, bytes.Equal(want, buf.Bytes()), "content differs: %d bytes, want %d", buf.Len(), len(want))
			assert.Equal(t, int64(len(want)), res.Bytes)
			assert.Equal(t, tc.wantBlock, res.BlockSize)
			assert.Equal(t, tc.wantWin, res.WindowSize)

			if tc.opts.TransferSize {
				assert.Equal(t, int64(len(want)), res.TransferSize)
			} else {
				assert.Equal(t, int64(-1), res.TransferSize)
			}
		})
	}

	for _, tr := range ts.waitTransfers(t, 7) {
		require.NoError(t, tr.Err)
		assert.True(t, tr.Started)
		assert.Equal(t, tr.Size, tr.Stats.Bytes)
	}
}

func TestServerRefusals(t *testing.T) {
	t.Parallel()

	ts := startServer(t, "127.0.0.1:0", Config{}, testFiles)

	for _, tc := range []struct {
		name     string
		file     string
		opts     ClientOptions
		wantCode uint16
		wantMsg  string
	}{
		{name: "missing", file: "nothing", wantCode: ErrCodeNotFound, wantMsg: "file not found"},
		{name: "refused", file: "secret", wantCode: ErrCodeAccess, wantMsg: "access violation"},
		{name: "internal error hidden", file: "broken", wantCode: ErrCodeUndefined, wantMsg: "error opening file"},
		{name: "bad blksize", file: "ipxe.efi", opts: ClientOptions{BlockSize: 4}, wantCode: ErrCodeOptionRefuse, wantMsg: `invalid blksize value "4": want 8 to 65464`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Get(t.Context(), ts.addr, tc.file, tc.opts, io.Discard)

			var re *RemoteError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.wantCode, re.Code)
			assert.Equal(t, tc.wantMsg, re.Message)
		})
	}
}

// exchange sends one datagram to addr and returns the first answer, from any port.
func exchange(t *testing.T, addr string, pkt []byte) []byte {
	t.Helper()

	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)

	defer pc.Close()

	ua, err := net.ResolveUDPAddr("udp4", addr)
	require.NoError(t, err)

	_, err = pc.WriteToUDP(pkt, ua)
	require.NoError(t, err)

	require.NoError(t, pc.SetReadDeadline(time.Now().Add(5*time.Second)))

	buf := make([]byte, 1500)
	n, _, err := pc.ReadFromUDP(buf)
	require.NoError(t, err)

	return buf[:n]
}

func TestServerMalformed(t *testing.T) {
	t.Parallel()

	ts := startServer(t, "127.0.0.1:0", Config{}, testFiles)

	for _, tc := range []struct {
		name     string
		pkt      []byte
		wantCode uint16
		wantMsg  string
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\n\r\n"), ErrCodeIllegalOp, "malformed request: opcode 18245 is not a request"},
		{"one byte", []byte{1}, ErrCodeIllegalOp, "malformed request: short packet"},
		{"ACK to the server port", []byte{0, 4, 0, 1}, ErrCodeIllegalOp, "malformed request: opcode 4 is not a request"},
		{"unterminated", []byte("\x00\x01ipxe.efi\x00octet"), ErrCodeIllegalOp, "malformed request: request not NUL-terminated"},
		{"unknown mode", rrq("ipxe.efi", "binary"), ErrCodeIllegalOp, `malformed request: unknown mode "binary"`},
		{"netascii", rrq("ipxe.efi", "netascii"), ErrCodeIllegalOp, "mode netascii is not served: use octet"},
		{"write", append([]byte{0, 2}, rrq("new.efi", "octet")[2:]...), ErrCodeAccess, "write requests are refused: read-only server"},
		{"bad windowsize", rrq("ipxe.efi", "octet", "windowsize", "0"), ErrCodeOptionRefuse, `invalid windowsize value "0": want 1 to 65535`},
		{"oversize", append(rrq("ipxe.efi", "octet"), make([]byte, 4000)...), ErrCodeIllegalOp, "malformed request: request longer than 2048 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply := exchange(t, ts.addr, tc.pkt)
			require.GreaterOrEqual(t, len(reply), 4)
			require.Equal(t, opERROR, uint16(reply[0])<<8|uint16(reply[1]), "reply %q", reply)

			e := parseError(reply[2:])
			assert.Equal(t, tc.wantCode, e.Code)
			assert.Equal(t, tc.wantMsg, e.Message)
		})
	}

	// An ERROR is not answered: two servers must not trade them forever.
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)

	defer pc.Close()

	ua, err := net.ResolveUDPAddr("udp4", ts.addr)
	require.NoError(t, err)

	_, err = pc.WriteToUDP(appendError(nil, ErrCodeIllegalOp, "malformed request"), ua)
	require.NoError(t, err)
	require.NoError(t, pc.SetReadDeadline(time.Now().Add(300*time.Millisecond)))

	_, _, err = pc.ReadFromUDP(make([]byte, 100))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "an ERROR was answered")

	trs := ts.waitTransfers(t, 10)
	for _, tr := range trs {
		assert.Error(t, tr.Err)
		assert.False(t, tr.Started)
	}

	assert.True(t, slices.ContainsFunc(trs, func(tr Transfer) bool { return strings.Contains(tr.Err.Error(), "not answered") }))
}

// TestServerWildcard checks that a server listening on every address answers from the
// address it was asked on, which the client checks.
func TestServerWildcard(t *testing.T) {
	t.Parallel()

	ipv6 := true
	if c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback}); err != nil {
		ipv6 = false
	} else {
		c.Close()
	}

	for _, tc := range []struct {
		listen string
		ask    []string
	}{
		{"0.0.0.0:0", []string{"127.0.0.1", "127.0.0.2"}},
		// The provider's default (":69"): one socket for IPv4 and IPv6.
		{":0", []string{"127.0.0.1", "127.0.0.2", "::1"}},
	} {
		t.Run(tc.listen, func(t *testing.T) {
			ts := startServer(t, tc.listen, Config{}, testFiles)
			_, port, err := net.SplitHostPort(ts.addr)
			require.NoError(t, err)

			for _, ip := range tc.ask {
				if strings.Contains(ip, ":") && !ipv6 {
					continue
				}

				var buf bytes.Buffer

				_, err := Get(t.Context(), net.JoinHostPort(ip, port), "undionly.kpxe", ClientOptions{BlockSize: 1468, WindowSize: 4}, &buf)
				require.NoError(t, err, ip)
				assert.Equal(t, testFiles["undionly.kpxe"], buf.Bytes())
			}
		})
	}
}

func TestServerBusyAndShutdown(t *testing.T) {
	t.Parallel()

	// One transfer at a time; the first one's client never acknowledges.
	ts := startServer(t, "127.0.0.1:0", Config{MaxTransfers: 1, Timeout: time.Minute}, testFiles)

	reply := exchange(t, ts.addr, rrq("ipxe.efi", "octet"))
	require.Equal(t, []byte{0, 3, 0, 1}, reply[:4], "the first request gets data")

	reply = exchange(t, ts.addr, rrq("ipxe.efi", "octet"))
	e := parseError(reply[2:])
	assert.Equal(t, &RemoteError{Code: ErrCodeUndefined, Message: "server busy"}, e)

	trs := ts.waitTransfers(t, 1)
	require.ErrorIs(t, trs[0].Err, ErrBusy)
	// The cleanup checks that Serve returns promptly though a transfer waits a minute.
}

// silentClient sends one request from a socket on local and returns the first answer and
// its source; it never acknowledges anything.
func silentClient(t *testing.T, local, addr string, pkt []byte) ([]byte, netip.AddrPort) {
	t.Helper()

	pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(local), 0)))
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })

	ua, err := net.ResolveUDPAddr("udp4", addr)
	require.NoError(t, err)

	_, err = pc.WriteToUDP(pkt, ua)
	require.NoError(t, err)
	require.NoError(t, pc.SetReadDeadline(time.Now().Add(5*time.Second)))

	buf := make([]byte, 1500)
	n, from, err := pc.ReadFromUDPAddrPort(buf)
	require.NoError(t, err)

	return buf[:n], from
}

// TestServerStalledClientDropped: a client that never acknowledges gives its transfer's
// slot back within the server's bounds, whatever timeout it asked for.
func TestServerStalledClientDropped(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		cfg  Config
		opts []string
		// wantOACK is the OACK expected, nil for data at once.
		wantOACK []Option
		within   time.Duration
	}{
		{
			// 255 s asked: not acknowledged; 3 waits of the server's 100 ms instead of
			// 3 of 255 s.
			name: "timeout 255 asked", cfg: Config{Timeout: 100 * time.Millisecond, Retries: 2},
			opts: []string{"timeout", "255", "tsize", "0"}, wantOACK: []Option{{OptTransfer, "850528"}}, within: 3 * time.Second,
		},
		{
			// The server's own timeout and retries would wait 100 s: the stall bound
			// ends it first.
			name: "stall bound", cfg: Config{Timeout: 100 * time.Millisecond, Retries: 1000, MaxStall: 500 * time.Millisecond},
			within: 3 * time.Second,
		},
		{
			name: "stall bound after the OACK", cfg: Config{Timeout: time.Minute, MaxStall: 500 * time.Millisecond},
			opts: []string{"blksize", "1468"}, wantOACK: []Option{{OptBlockSize, "1468"}}, within: 3 * time.Second,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ts := startServer(t, "127.0.0.1:0", tc.cfg, testFiles)
			start := time.Now()

			reply, _ := silentClient(t, "127.0.0.1", ts.addr, rrq(append([]string{"ipxe.efi", "octet"}, tc.opts...)...))
			if tc.wantOACK != nil {
				require.Equal(t, opOACK, uint16(reply[0])<<8|uint16(reply[1]), "reply %q", reply)

				oack, err := parseOACK(reply[2:])
				require.NoError(t, err)
				assert.Equal(t, tc.wantOACK, oack)
			} else {
				require.Equal(t, []byte{0, 3, 0, 1}, reply[:4], "data at once")
			}

			var got []Transfer

			require.Eventually(t, func() bool {
				ts.mu.Lock()
				defer ts.mu.Unlock()

				got = append([]Transfer(nil), ts.transfers...)

				return len(got) == 1
			}, tc.within, 5*time.Millisecond, "the transfer still holds its slot after %s", tc.within)

			require.ErrorIs(t, got[0].Err, errTimeout)
			assert.Less(t, time.Since(start), tc.within)
		})
	}
}

// TestServerPerClientLimit: one address gets MaxTransfersPerClient transfers at a time,
// the next is refused with an ERROR, and another address is served meanwhile.
func TestServerPerClientLimit(t *testing.T) {
	t.Parallel()

	// Transfers of clients that never acknowledge last past the test.
	ts := startServer(t, "0.0.0.0:0", Config{Timeout: time.Minute}, testFiles)
	_, port, err := net.SplitHostPort(ts.addr)
	require.NoError(t, err)

	addr := net.JoinHostPort("127.0.0.1", port)

	for i := range defaultMaxTransfersPerClient {
		reply, _ := silentClient(t, "127.0.0.1", addr, rrq("ipxe.efi", "octet"))
		require.Equal(t, []byte{0, 3, 0, 1}, reply[:4], "request %d gets data", i)
	}

	reply, from := silentClient(t, "127.0.0.1", addr, rrq("ipxe.efi", "octet"))
	require.Equal(t, opERROR, uint16(reply[0])<<8|uint16(reply[1]), "reply %q…", reply[:min(len(reply), 32)])
	assert.Equal(t, &RemoteError{Code: ErrCodeUndefined, Message: "server busy: too many transfers from this address"}, parseError(reply[2:]))
	assert.Equal(t, port, fmt.Sprint(from.Port()), "refused from the server's port")

	trs := ts.waitTransfers(t, 1)
	require.ErrorIs(t, trs[0].Err, ErrClientBusy)
	require.ErrorIs(t, trs[0].Err, ErrBusy)

	// Another address is served whole, and again once its transfers are done: the
	// count goes down as transfers end.
	for range defaultMaxTransfersPerClient + 2 {
		var buf bytes.Buffer

		_, err := Get(t.Context(), addr, "undionly.kpxe", ClientOptions{BlockSize: 1468, Local: netip.MustParseAddr("127.0.0.2")}, &buf)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(testFiles["undionly.kpxe"], buf.Bytes()))
	}
}

func TestPinClient(t *testing.T) {
	t.Parallel()

	ts := startServer(t, "127.0.0.1:0", Config{}, testFiles)

	for _, blksize := range []int{0, 512, 1468} {
		c, err := pintftp.NewClient(ts.addr)
		require.NoError(t, err)
		c.SetTimeout(2 * time.Second)
		c.SetRetries(3)

		if blksize > 0 {
			c.SetBlockSize(blksize)
		}

		c.RequestTSize(true)

		wt, err := c.Receive("ipxe.efi", "octet")
		require.NoError(t, err, "blksize %d", blksize)

		size, ok := wt.(pintftp.IncomingTransfer).Size()
		assert.True(t, ok)
		assert.Equal(t, int64(len(testFiles["ipxe.efi"])), size)

		var buf bytes.Buffer

		_, err = wt.WriteTo(&buf)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(testFiles["ipxe.efi"], buf.Bytes()), "blksize %d: content differs", blksize)
	}

	c, err := pintftp.NewClient(ts.addr)
	require.NoError(t, err)
	c.SetTimeout(time.Second)
	c.SetRetries(1)

	_, err = c.Receive("nothing", "octet")
	assert.ErrorContains(t, err, "file not found")
}

// TestAtftpClient fetches with atftp, when installed, with and without windowsize.
func TestAtftpClient(t *testing.T) {
	t.Parallel()

	atftp, err := exec.LookPath("atftp")
	if err != nil {
		t.Skip("atftp is not installed (apt-get install atftp)")
	}

	ts := startServer(t, "127.0.0.1:0", Config{}, testFiles)
	host, port, err := net.SplitHostPort(ts.addr)
	require.NoError(t, err)

	for _, opts := range [][]string{
		nil,
		{"--option", "blksize 1468"},
		{"--option", "blksize 1468", "--option", "windowsize 8", "--option", "tsize 0"},
		{"--option", "blksize 1468", "--option", "windowsize 16"},
	} {
		t.Run(strings.Join(opts, " "), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ipxe.efi")
			args := append(append([]string{"--get", "-r", "ipxe.efi", "-l", out}, opts...), host, port)

			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()

			b, err := exec.CommandContext(ctx, atftp, args...).CombinedOutput()
			require.NoError(t, err, "atftp %s: %s", args, b)

			got, err := os.ReadFile(out)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(testFiles["ipxe.efi"], got), "content differs: %d bytes", len(got))
		})
	}
}

func TestNewServerConfig(t *testing.T) {
	t.Parallel()

	open := func(context.Context, *Request, netip.AddrPort) (io.ReaderAt, int64, error) { return nil, 0, nil }

	for _, tc := range []struct {
		cfg     Config
		wantErr string
	}{
		{Config{Open: open}, ""},
		{Config{}, "without an Open function"},
		{Config{Open: open, MaxBlockSize: 4}, "maximum block size 4"},
		{Config{Open: open, MaxBlockSize: 70000}, "maximum block size 70000"},
		{Config{Open: open, MaxWindowSize: 70000}, "maximum window size 70000"},
	} {
		_, err := NewServer(tc.cfg)
		if tc.wantErr == "" {
			assert.NoError(t, err)
		} else {
			assert.ErrorContains(t, err, tc.wantErr)
		}
	}
}

// BenchmarkTransfers fetches the iPXE-sized file with 10 clients at once over loopback,
// server and clients in this process (bench tftp compares against atftpd).
func BenchmarkTransfers(b *testing.B) {
	files := map[string][]byte{"ipxe.efi": randomBytes(850528)}

	for _, window := range []int{0, 4, 16} {
		b.Run(fmt.Sprintf("windowsize=%d", window), func(b *testing.B) {
			ts := startServer(b, "127.0.0.1:0", Config{}, files)
			opts := ClientOptions{BlockSize: 1468, WindowSize: window}

			b.SetBytes(int64(len(files["ipxe.efi"])))
			b.SetParallelism(max(10/runtimeProcs(), 1))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := Get(b.Context(), ts.addr, "ipxe.efi", opts, io.Discard); err != nil {
						b.Error(err)
					}
				}
			})
		})
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
