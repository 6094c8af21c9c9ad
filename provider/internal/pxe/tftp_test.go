package pxe

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	pintftp "github.com/pin/tftp/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/internal/tftp"
)

func TestCleanTFTPPath(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"undionly.kpxe", "undionly.kpxe", true},
		{"/undionly.kpxe", "undionly.kpxe", true},
		{"efi/ipxe.efi", "efi/ipxe.efi", true},
		{"efi//ipxe.efi", "efi/ipxe.efi", true},
		{"./ipxe.efi", "ipxe.efi", true},
		{"", "", false},
		{"/", "", false},
		{".", "", false},
		{"..", "", false},
		{"../etc/passwd", "", false},
		{"efi/../../etc/passwd", "", false},
		{"efi/../ipxe.efi", "", false},
		{"//etc/passwd", "", false},
		{"/../etc/passwd", "", false},
		{"ipxe.efi\x00.txt", "", false},
		{`..\..\windows`, "", false},
		{"a/..", "", false},
	} {
		got, err := CleanTFTPPath(tc.in)
		if !tc.ok {
			assert.Error(t, err, "%q", tc.in)

			continue
		}

		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}

// tftpFixture is a TFTP root with boot files, a symlink that escapes (refused), a boot
// file symlinked outside the root (allowed, like Debian's ipxe.efi), and an extra file.
type tftpFixture struct {
	addr  string
	files map[string][]byte
}

func newTFTPFixture(t *testing.T) *tftpFixture {
	t.Helper()

	root := t.TempDir()
	outside := t.TempDir()

	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)

		return b
	}

	f := &tftpFixture{files: map[string][]byte{
		"undionly.kpxe":  random(74213),
		"snponly.efi":    random(3 << 20),
		"ipxe.efi":       random(1 << 20),
		"ipxe-arm64.efi": random(4096),
		"efi/boot.efi":   random(1),
		"empty":          {},
	}}

	require.NoError(t, os.MkdirAll(filepath.Join(root, "efi"), 0o755))

	for _, name := range []string{"undionly.kpxe", "snponly.efi", "efi/boot.efi", "empty"} {
		require.NoError(t, os.WriteFile(filepath.Join(root, name), f.files[name], 0o644))
	}

	require.NoError(t, os.WriteFile(filepath.Join(outside, "ipxe.efi"), f.files["ipxe.efi"], 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "ipxe.efi"), filepath.Join(root, "ipxe.efi")))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "escape")))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "outdir")))
	require.NoError(t, os.Symlink("/boot/missing.efi", filepath.Join(root, "dangling.efi")))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "arm64.efi"), f.files["ipxe-arm64.efi"], 0o644))

	srv, err := NewTFTP(TFTPConfig{
		Root:      root,
		BootFiles: []string{"ipxe.efi", "undionly.kpxe"},
		Files:     map[string]string{"ipxe-arm64.efi": filepath.Join(outside, "arm64.efi")},
		Timeout:   time.Second,
	}, zaptest.NewLogger(t), NewMetrics(nil))
	require.NoError(t, err)

	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)

	f.addr = conn.LocalAddr().String()

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- srv.Serve(ctx, conn) }()

	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})

	return f
}

func tftpGet(t *testing.T, addr, name string, blksize int) ([]byte, error) {
	t.Helper()

	c, err := pintftp.NewClient(addr)
	require.NoError(t, err)
	c.SetTimeout(time.Second)
	c.SetRetries(2)

	if blksize > 0 {
		c.SetBlockSize(blksize)
	}

	wt, err := c.Receive(name, "octet")
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer

	_, err = wt.WriteTo(&buf)

	return buf.Bytes(), err
}

func TestTFTPDownload(t *testing.T) {
	t.Parallel()

	f := newTFTPFixture(t)

	for _, tc := range []struct {
		name    string
		blksize int
	}{
		{"undionly.kpxe", 0},
		{"/undionly.kpxe", 1468},
		{"snponly.efi", 1468},
		{"ipxe.efi", 1468},
		{"ipxe-arm64.efi", 512},
		{"efi/boot.efi", 0},
		{"empty", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tftpGet(t, f.addr, tc.name, tc.blksize)
			require.NoError(t, err)

			want := f.files[tc.name]
			if tc.name[0] == '/' {
				want = f.files[tc.name[1:]]
			}

			assert.True(t, bytes.Equal(want, got), "content of %s differs (%d vs %d bytes)", tc.name, len(want), len(got))
		})
	}
}

func TestTFTPRefused(t *testing.T) {
	t.Parallel()

	f := newTFTPFixture(t)

	// A NUL ends the file name on the wire, so NUL handling is CleanTFTPPath's test.
	for _, name := range []string{
		"../etc/passwd",
		"efi/../../etc/passwd",
		"/etc/passwd",
		"//etc/passwd",
		"escape",
		"outdir/secret",
		"dangling.efi",
		"efi",
		"missing",
		`..\secret`,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := tftpGet(t, f.addr, name, 0)
			assert.Error(t, err)
			assert.Empty(t, got)
		})
	}

	t.Run("write", func(t *testing.T) {
		c, err := pintftp.NewClient(f.addr)
		require.NoError(t, err)
		c.SetTimeout(time.Second)
		c.SetRetries(1)

		rf, err := c.Send("new.efi", "octet")
		if err == nil {
			_, err = rf.ReadFrom(bytes.NewReader([]byte("payload")))
		}

		assert.Error(t, err)
	})
}

// TestTFTPWindowSize fetches with RFC 7440 windows, as UEFI firmware does, and checks
// refusals arrive with their TFTP error codes and are counted.
func TestTFTPWindowSize(t *testing.T) {
	t.Parallel()

	f := newTFTPFixture(t)

	for _, tc := range []struct {
		name string
		opts tftp.ClientOptions
	}{
		{"snponly.efi", tftp.ClientOptions{BlockSize: 1468, WindowSize: 16, TransferSize: true}},
		{"ipxe.efi", tftp.ClientOptions{BlockSize: 1468, WindowSize: 8}},
		{"undionly.kpxe", tftp.ClientOptions{BlockSize: 1432, WindowSize: 64}},
		{"empty", tftp.ClientOptions{WindowSize: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer

			res, err := tftp.Get(t.Context(), f.addr, tc.name, tc.opts, &buf)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(f.files[tc.name], buf.Bytes()), "content of %s differs", tc.name)
			assert.Equal(t, tc.opts.WindowSize, res.WindowSize)
		})
	}

	for name, code := range map[string]uint16{
		"missing":       tftp.ErrCodeNotFound,
		"escape":        tftp.ErrCodeAccess,
		"../etc/passwd": tftp.ErrCodeAccess,
		"efi":           tftp.ErrCodeAccess,
	} {
		_, err := tftp.Get(t.Context(), f.addr, name, tftp.ClientOptions{WindowSize: 8}, &bytes.Buffer{})

		var re *tftp.RemoteError
		require.ErrorAs(t, err, &re, name)
		assert.Equal(t, code, re.Code, name)
	}
}

func TestTFTPMetrics(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)

	srv, err := NewTFTP(TFTPConfig{Root: "/nonexistent-is-checked-below", Timeout: time.Second}, zaptest.NewLogger(t), m)
	require.Error(t, err, "a missing root is refused")
	require.Nil(t, srv)

	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "boot.efi"), make([]byte, 5000), 0o644))

	srv, err = NewTFTP(TFTPConfig{Root: root, Timeout: time.Second}, zaptest.NewLogger(t), m)
	require.NoError(t, err)

	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- srv.Serve(ctx, conn) }()

	addr := conn.LocalAddr().String()

	_, err = tftp.Get(t.Context(), addr, "boot.efi", tftp.ClientOptions{BlockSize: 1468, WindowSize: 4}, &bytes.Buffer{})
	require.NoError(t, err)

	_, err = tftp.Get(t.Context(), addr, "missing", tftp.ClientOptions{}, &bytes.Buffer{})
	require.Error(t, err)

	_, err = tftp.Get(t.Context(), addr, "boot.efi", tftp.ClientOptions{BlockSize: 4}, &bytes.Buffer{})
	require.Error(t, err)

	// A UEFI-style size probe: tsize asked, the OACK answered with an ERROR. The OACK
	// comes from the transfer's own port, so the socket is not connected.
	probe, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)

	defer probe.Close()

	_, err = probe.WriteToUDP([]byte("\x00\x01boot.efi\x00octet\x00tsize\x000\x00"), conn.LocalAddr().(*net.UDPAddr))
	require.NoError(t, err)
	require.NoError(t, probe.SetReadDeadline(time.Now().Add(5*time.Second)))

	buf := make([]byte, 512)
	n, from, err := probe.ReadFromUDP(buf)
	require.NoError(t, err)
	require.Equal(t, "\x00\x06tsize\x005000\x00", string(buf[:n]))

	_, err = probe.WriteToUDP([]byte("\x00\x05\x00\x08size known\x00"), from)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		return counterValue(t, m.tftpTransfers.WithLabelValues("aborted")) == 1
	}, 10*time.Second, 5*time.Millisecond)

	cancel()
	require.NoError(t, <-done)

	assert.InDelta(t, 1, counterValue(t, m.tftpTransfers.WithLabelValues("success")), 0)
	assert.InDelta(t, 0, counterValue(t, m.tftpTransfers.WithLabelValues("failure")), 0)
	assert.InDelta(t, 1, counterValue(t, m.tftpTransfers.WithLabelValues("aborted")), 0)
	assert.InDelta(t, 1, counterValue(t, m.tftpErrors.WithLabelValues("not_found")), 0)
	assert.InDelta(t, 1, counterValue(t, m.tftpErrors.WithLabelValues("refused")), 0)
	assert.InDelta(t, 5000, counterValue(t, m.tftpBytes), 0)
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()

	var m dto.Metric
	require.NoError(t, c.Write(&m))

	return m.GetCounter().GetValue()
}
