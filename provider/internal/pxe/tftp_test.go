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

	"github.com/pin/tftp/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
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

	c, err := tftp.NewClient(addr)
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
		c, err := tftp.NewClient(f.addr)
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
