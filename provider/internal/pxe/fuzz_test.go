package pxe

import (
	"path"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

func FuzzAnswer(f *testing.F) {
	seed := func(mt dhcpv4.MessageType, arch int, mods ...dhcpv4.Modifier) {
		f.Add(pxeRequest(f, mt, arch, mods...).ToBytes(), false)
	}

	seed(dhcpv4.MessageTypeDiscover, 0)
	seed(dhcpv4.MessageTypeDiscover, 7, withGUID)
	seed(dhcpv4.MessageTypeDiscover, 9, withIPXE)
	seed(dhcpv4.MessageTypeDiscover, 11)
	seed(dhcpv4.MessageTypeRequest, 9, withUsAsID)
	seed(dhcpv4.MessageTypeDiscover, -1)
	f.Add(pxeRequest(f, dhcpv4.MessageTypeRequest, 0).ToBytes(), true)
	f.Add([]byte{}, false)

	cfgs := []*Config{testConfig(f, false), testConfig(f, true)}

	f.Fuzz(func(t *testing.T, pkt []byte, bootPort bool) {
		req, err := dhcpv4.FromBytes(pkt)
		if err != nil {
			return
		}

		for _, cfg := range cfgs {
			resp, err := answer(cfg, req, bootPort)
			if err != nil {
				if resp != nil {
					t.Fatalf("reply with error %v", err)
				}

				continue
			}

			allowed := []string{cfg.BIOSBootFile, cfg.UEFIBootFile, cfg.ScriptURL}
			if cfg.ARM64BootFile != "" {
				allowed = append(allowed, cfg.ARM64BootFile)
			}

			file := resp.BootFileNameOption()
			ok := false

			for _, a := range allowed {
				ok = ok || file == a
			}

			if !ok || resp.BootFileName != file {
				t.Fatalf("boot file %q / %q not one of %v", file, resp.BootFileName, allowed)
			}

			if !resp.YourIPAddr.IsUnspecified() {
				t.Fatalf("proxy reply with yiaddr %s", resp.YourIPAddr)
			}

			// The reply must survive the wire.
			if _, err := dhcpv4.FromBytes(resp.ToBytes()); err != nil {
				t.Fatalf("reply does not parse: %v", err)
			}
		}
	})
}

func FuzzCleanTFTPPath(f *testing.F) {
	for _, s := range []string{"undionly.kpxe", "/ipxe.efi", "../etc/passwd", "a/../../b", "a//b/./c", "x\x00y", `..\x`, ".", "/"} {
		f.Add(s)
	}

	f.Fuzz(func(t *testing.T, name string) {
		clean, err := CleanTFTPPath(name)
		if err != nil {
			return
		}

		if clean == "" || strings.HasPrefix(clean, "/") || strings.ContainsAny(clean, "\x00\\") {
			t.Fatalf("%q → %q", name, clean)
		}

		if clean == ".." || strings.HasPrefix(clean, "../") || path.Clean(clean) != clean {
			t.Fatalf("%q → %q escapes or is not clean", name, clean)
		}

		for elem := range strings.SplitSeq(clean, "/") {
			if elem == ".." || elem == "." || elem == "" {
				t.Fatalf("%q → %q has element %q", name, clean, elem)
			}
		}
	})
}
