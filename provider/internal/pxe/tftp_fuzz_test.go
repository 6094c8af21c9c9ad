package pxe

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-metal/anvil/internal/fuzzcorpus"
	"github.com/anvil-metal/anvil/internal/tftp"
)

// tftpPacket builds a request datagram: opcode, then NUL-terminated fields.
func tftpPacket(op byte, fields ...string) []byte {
	b := []byte{0, op}
	for _, f := range fields {
		b = append(append(b, f...), 0)
	}

	return b
}

// encodeRequest is a parsed request back on the wire.
func encodeRequest(r *tftp.Request) []byte {
	op := byte(1)
	if r.Write {
		op = 2
	}

	fields := []string{r.Filename, r.Mode}
	for _, o := range r.Options {
		fields = append(fields, o.Name, o.Value)
	}

	return tftpPacket(op, fields...)
}

// FuzzTFTPRequest takes any datagram the path a request to port 69 takes: parsed, then
// the file resolved and opened under the TFTP root. A parsed request re-encodes to
// itself; refusals are access or not-found errors, short enough for an ERROR packet; and
// nothing is ever opened but the root's files and the configured boot files (never the
// file a symlink in the root points to outside it).
func FuzzTFTPRequest(f *testing.F) {
	fuzzcorpus.Seed(f,
		fuzzcorpus.E("bios", tftpPacket(1, "undionly.kpxe", "octet")),
		fuzzcorpus.E("uefi-options", tftpPacket(1, "ipxe.efi", "octet", "blksize", "1468", "tsize", "0", "windowsize", "16")),
		fuzzcorpus.E("ipxe-blksize", tftpPacket(1, "/undionly.kpxe", "octet", "blksize", "1432")),
		fuzzcorpus.E("arm64", tftpPacket(1, "arm64/ipxe.efi", "octet", "tsize", "0", "blksize", "1468")),
		fuzzcorpus.E("upper-mode", tftpPacket(1, "ipxe.efi", "OCTET", "TIMEOUT", "5")),
		fuzzcorpus.E("netascii", tftpPacket(1, "undionly.kpxe", "netascii")),
		fuzzcorpus.E("write", tftpPacket(2, "undionly.kpxe", "octet")),
		fuzzcorpus.E("traversal", tftpPacket(1, "../../etc/passwd", "octet")),
		fuzzcorpus.E("symlink-out", tftpPacket(1, "escape", "octet")),
		fuzzcorpus.E("backslash", tftpPacket(1, `..\..\secret`, "octet")),
		fuzzcorpus.E("dup-option", tftpPacket(1, "ipxe.efi", "octet", "blksize", "512", "BLKSIZE", "1468")),
		fuzzcorpus.E("odd-options", tftpPacket(1, "ipxe.efi", "octet", "blksize")),
		fuzzcorpus.E("bad-mode", tftpPacket(1, "ipxe.efi", "binary")),
		fuzzcorpus.E("no-nul", []byte("\x00\x01ipxe.efi\x00octet")),
		fuzzcorpus.E("ack", []byte{0, 4, 0, 1}),
		fuzzcorpus.E("short", []byte{0, 1}),
		fuzzcorpus.E("oversize", tftpPacket(1, strings.Repeat("a", 3000), "octet")),
	)

	root := f.TempDir()
	outside := f.TempDir()
	files := map[string]string{
		"undionly.kpxe":  "BIOS IPXE",
		"arm64/ipxe.efi": "ARM64 IPXE",
	}

	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			f.Fatal(err)
		}

		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			f.Fatal(err)
		}
	}

	// ipxe.efi points outside the root as Debian's does, and is a configured boot file;
	// escape points outside too and is not.
	for name, content := range map[string]string{"ipxe.efi": "UEFI IPXE", "secret": "SECRET"} {
		if err := os.WriteFile(filepath.Join(outside, name), []byte(content), 0o644); err != nil {
			f.Fatal(err)
		}
	}

	files["ipxe.efi"] = "UEFI IPXE"

	for link, target := range map[string]string{"ipxe.efi": "ipxe.efi", "escape": "secret"} {
		if err := os.Symlink(filepath.Join(outside, target), filepath.Join(root, link)); err != nil {
			f.Fatal(err)
		}
	}

	srv, err := NewTFTP(TFTPConfig{Root: root, BootFiles: []string{"ipxe.efi"}}, zapNop(), NewMetrics(nil))
	if err != nil {
		f.Fatal(err)
	}

	served := make([]string, 0, len(files))
	for _, c := range files {
		served = append(served, c)
	}

	remote := netip.MustParseAddrPort("10.199.0.50:2070")

	f.Fuzz(func(t *testing.T, pkt []byte) {
		req, err := tftp.ParseRequest(pkt)
		if err != nil {
			if req != nil {
				t.Fatalf("request and error %v", err)
			}

			if len(err.Error()) > 128 {
				t.Fatalf("error too long for an ERROR packet: %d bytes", len(err.Error()))
			}

			return
		}

		again, err := tftp.ParseRequest(encodeRequest(req))
		if err != nil {
			t.Fatalf("re-encoded request does not parse: %v", err)
		}

		if again.Write != req.Write || again.Filename != req.Filename || again.Mode != req.Mode || !slices.Equal(again.Options, req.Options) {
			t.Fatalf("request %+v re-parses as %+v", req, again)
		}

		r, size, err := srv.open(context.Background(), req, remote)
		if err != nil {
			if !errors.Is(err, tftp.ErrAccess) && !errors.Is(err, tftp.ErrNotFound) {
				t.Fatalf("refusal %v is neither access nor not-found", err)
			}

			return
		}

		if c, ok := r.(io.Closer); ok {
			defer c.Close()
		}

		b := make([]byte, size)
		if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("error reading %q: %v", req.Filename, err)
		}

		if !slices.Contains(served, string(b)) {
			t.Fatalf("%q opened %q, not a served file", req.Filename, b)
		}
	})
}
