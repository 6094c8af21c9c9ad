package pxe

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"path"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/anvil-metal/anvil/internal/fuzzcorpus"
)

// dhcpSeeds are the packets the provisioning network carries, built with the real
// encoder, and malformed ones: what firmware, iPXE, Talos and strangers send to 67/4011.
func dhcpSeeds(f *testing.F) []fuzzcorpus.Entry {
	f.Helper()

	pkt := func(mt dhcpv4.MessageType, arch int, mods ...dhcpv4.Modifier) []byte {
		// A fixed transaction ID keeps the committed corpus stable.
		mods = append(mods, dhcpv4.WithTransactionID(dhcpv4.TransactionID{0x5e, 0xed, 0, 1}))

		return pxeRequest(f, mt, arch, mods...).ToBytes()
	}

	discover := pkt(dhcpv4.MessageTypeDiscover, 7, withGUID)

	// A bad magic cookie, an option running past the end, a truncated header.
	badCookie := bytes.Clone(discover)
	badCookie[236] ^= 0xff

	overrun := append(bytes.Clone(discover[:240]), byte(dhcpv4.OptionClassIdentifier), 200, 'P', 'X', 'E')

	iPXEEncap := dhcpv4.WithGeneric(dhcpv4.GenericOptionCode(175), []byte{0x13, 0x01, 0x01, 0x10, 0x01, 0x01}) // iPXE: bzimage, http

	httpBoot := dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00016:UNDI:003001"))
	relayed := func(d *dhcpv4.DHCPv4) { d.GatewayIPAddr = net.IPv4(10, 200, 0, 1) }
	hlen16 := func(d *dhcpv4.DHCPv4) { d.ClientHWAddr = make(net.HardwareAddr, 16) }

	talos, err := dhcpv4.NewDiscovery(net.HardwareAddr{0x52, 0x54, 0, 0, 0, 9}, dhcpv4.WithOption(dhcpv4.OptHostName("talos-abc")),
		dhcpv4.WithTransactionID(dhcpv4.TransactionID{0x5e, 0xed, 0, 2}))
	if err != nil {
		f.Fatal(err)
	}

	return []fuzzcorpus.Entry{
		fuzzcorpus.E("bios-discover", pkt(dhcpv4.MessageTypeDiscover, 0), false),
		fuzzcorpus.E("uefi-discover-guid", discover, false),
		fuzzcorpus.E("uefi-http-discover", pkt(dhcpv4.MessageTypeDiscover, 16, httpBoot), false),
		fuzzcorpus.E("ipxe-discover", pkt(dhcpv4.MessageTypeDiscover, 9, withIPXE, iPXEEncap), false),
		fuzzcorpus.E("arm64-discover", pkt(dhcpv4.MessageTypeDiscover, 11), false),
		fuzzcorpus.E("request-us", pkt(dhcpv4.MessageTypeRequest, 9, withUsAsID), false),
		fuzzcorpus.E("request-bootport", pkt(dhcpv4.MessageTypeRequest, 0), true),
		fuzzcorpus.E("relayed-discover", pkt(dhcpv4.MessageTypeDiscover, 7, relayed), false),
		fuzzcorpus.E("no-arch", pkt(dhcpv4.MessageTypeDiscover, -1), false),
		fuzzcorpus.E("hlen16", pkt(dhcpv4.MessageTypeDiscover, 7, hlen16), false),
		fuzzcorpus.E("release", pkt(dhcpv4.MessageTypeRelease, 0), false),
		fuzzcorpus.E("decline", pkt(dhcpv4.MessageTypeDecline, 0, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 199, 0, 100)))), false),
		fuzzcorpus.E("inform", pkt(dhcpv4.MessageTypeInform, 0), false),
		fuzzcorpus.E("talos-discover", talos.ToBytes(), false),
		fuzzcorpus.E("bad-cookie", badCookie, false),
		fuzzcorpus.E("option-overrun", overrun, false),
		fuzzcorpus.E("truncated", discover[:100], false),
		fuzzcorpus.E("empty", []byte{}, false),
	}
}

// FuzzAnswer feeds datagrams to the ProxyDHCP's handler: garbage is dropped, and every
// answer offers one of the configured boot files, never an address, and parses.
func FuzzAnswer(f *testing.F) {
	fuzzcorpus.Seed(f, dhcpSeeds(f)...)

	m := NewMetrics(nil)
	src := netip.MustParseAddrPort("0.0.0.0:68")

	var proxies []*ProxyDHCP

	for _, arm64 := range []bool{false, true} {
		proxies = append(proxies, testProxy(*testConfig(f, arm64), m.dhcp("proxy"), m.dhcp("bootserver")))
	}

	f.Fuzz(func(t *testing.T, pkt []byte, bootPort bool) {
		for _, p := range proxies {
			cfg := &p.cfg

			out, dst := p.handle(pkt, src, bootPort)
			if out == nil {
				continue
			}

			if !dst.IsValid() || dst.Port() == 0 {
				t.Fatalf("reply to %s", dst)
			}

			req, err := dhcpv4.FromBytes(pkt)
			if err != nil {
				t.Fatalf("answered a packet that does not parse: %v", err)
			}

			resp, err := dhcpv4.FromBytes(out)
			if err != nil {
				t.Fatalf("reply does not parse: %v", err)
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

			if resp.TransactionID != req.TransactionID || !bytes.Equal(resp.ClientHWAddr, req.ClientHWAddr) {
				t.Fatalf("reply xid %s mac %s to request xid %s mac %s", resp.TransactionID, resp.ClientHWAddr, req.TransactionID, req.ClientHWAddr)
			}
		}
	})
}

// FuzzDHCPServer feeds datagrams to the full DHCP server: garbage is dropped, and every
// reply parses, answers the request's transaction and hands out only pool addresses.
func FuzzDHCPServer(f *testing.F) {
	fuzzcorpus.Seed(f, dhcpSeeds(f)...)

	cfg := testPoolConfig()
	cfg.ServerIP = testServerIP

	if err := cfg.Validate(); err != nil {
		f.Fatal(err)
	}

	src := netip.MustParseAddrPort("0.0.0.0:68")
	counters := NewMetrics(nil).dhcp("dhcp")

	f.Fuzz(func(t *testing.T, pkt []byte, renew bool) {
		s := newDHCPServer(cfg, memLeases{}, zapNop(), counters)

		// The same packet twice: a retransmission, or (renew) the client's second look.
		for range 1 + btoi(renew) {
			out, dst := s.handle(context.Background(), pkt, src)
			if out == nil {
				continue
			}

			if !dst.IsValid() {
				t.Fatalf("reply to %s", dst)
			}

			req, err := dhcpv4.FromBytes(pkt)
			if err != nil {
				t.Fatalf("answered a packet that does not parse: %v", err)
			}

			resp, err := dhcpv4.FromBytes(out)
			if err != nil {
				t.Fatalf("reply does not parse: %v", err)
			}

			if resp.TransactionID != req.TransactionID || resp.OpCode != dhcpv4.OpcodeBootReply {
				t.Fatalf("reply %s to request %s", resp.Summary(), req.Summary())
			}

			if resp.MessageType() == dhcpv4.MessageTypeNak {
				continue
			}

			a, ok := netip.AddrFromSlice(resp.YourIPAddr.To4())
			if !ok || !s.inPool(a) {
				t.Fatalf("handed out %s outside the pool", resp.YourIPAddr)
			}
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}

	return 0
}

func FuzzCleanTFTPPath(f *testing.F) {
	seeds := []fuzzcorpus.Entry{}
	for i, s := range []string{"undionly.kpxe", "/ipxe.efi", "../etc/passwd", "a/../../b", "a//b/./c", "x\x00y", `..\x`, ".", "/", "arm64/ipxe.efi", "//etc/shadow", "ipxe.efi/..", strings.Repeat("a/", 200)} {
		seeds = append(seeds, fuzzcorpus.E("name-"+string(rune('a'+i)), s))
	}

	fuzzcorpus.Seed(f, seeds...)

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
