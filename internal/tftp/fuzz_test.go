package tftp

import (
	"strconv"
	"testing"
)

func FuzzRequest(f *testing.F) {
	for _, pkt := range [][]byte{
		rrq("undionly.kpxe", "octet"),
		rrq("ipxe.efi", "octet", "blksize", "1468", "tsize", "0", "windowsize", "16"),
		rrq("ipxe.efi", "OCTET", "TIMEOUT", "5", "blksize", "65464"),
		rrq("x", "netascii", "windowsize", "0"),
		rrq("x", "octet", "blksize", "+8"),
		rrq("x", "\xf9\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae\xae"),
		append([]byte{0, 2}, rrq("x", "octet")[2:]...),
		{0, 1},
		{0, 4, 0, 1},
	} {
		f.Add(pkt)
	}

	lim := limits{maxBlockSize: 1468, maxWindowSize: 64}

	f.Fuzz(func(t *testing.T, pkt []byte) {
		req, err := ParseRequest(pkt)
		if err != nil {
			if req != nil {
				t.Fatalf("request and error %v", err)
			}

			// The error goes back in an ERROR packet, after a prefix.
			if len(err.Error()) > 128 {
				t.Fatalf("error of %d bytes: %q", len(err.Error()), err)
			}

			return
		}

		if req.Filename == "" || (req.Mode != "octet" && req.Mode != "netascii" && req.Mode != "mail") {
			t.Fatalf("accepted %+v", req)
		}

		p, err := negotiate(req, 850528, lim)
		if err != nil {
			if len(err.Error()) > 128 {
				t.Fatalf("error of %d bytes: %q", len(err.Error()), err)
			}

			return
		}

		if p.blockSize < minBlockSize || p.blockSize > lim.maxBlockSize || p.windowSize < 1 || p.windowSize > lim.maxWindowSize {
			t.Fatalf("negotiated %+v from %+v", p, req.Options)
		}

		for _, o := range p.oack {
			v, ok := req.Option(o.Name)
			if !ok {
				t.Fatalf("OACK names %s, not asked for", o.Name)
			}

			if _, err := strconv.Atoi(o.Value); err != nil {
				t.Fatalf("OACK %s value %q (asked %q)", o.Name, o.Value, v)
			}
		}
	})
}
