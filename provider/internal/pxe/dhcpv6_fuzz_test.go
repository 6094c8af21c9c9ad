package pxe

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/fuzzcorpus"
)

// dhcpv6Seeds are what a provisioning link carries to port 547, built with the real
// encoder, and malformed packets.
func dhcpv6Seeds(f *testing.F) []fuzzcorpus.Entry {
	f.Helper()

	pkt := func(mt dhcpv6.MessageType, kind string, mods ...dhcpv6.Modifier) []byte {
		return request6(f, mt, kind, mods...).ToBytes()
	}

	solicit := pkt(dhcpv6.MessageTypeSolicit, kindHTTP)

	relay, err := dhcpv6.EncapsulateRelay(request6(f, dhcpv6.MessageTypeSolicit, kindPXE), dhcpv6.MessageTypeRelayForward,
		net.ParseIP("fd00:199::fe"), net.ParseIP("fe80::5054:ff:fe12:3456"))
	if err != nil {
		f.Fatal(err)
	}

	relay.AddOption(dhcpv6.OptInterfaceID([]byte("eth7")))

	nested, err := dhcpv6.EncapsulateRelay(relay, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8::1"), net.ParseIP("fd00:199::fe"))
	if err != nil {
		f.Fatal(err)
	}

	// An option running past the end, a truncated header, a relay with no message.
	overrun := append(bytes.Clone(solicit[:4]), 0, byte(dhcpv6.OptionClientID), 0, 200, 0, 1)
	emptyRelay := relay.ToBytes()[:34]

	return []fuzzcorpus.Entry{
		fuzzcorpus.E("pxe-solicit", pkt(dhcpv6.MessageTypeSolicit, kindPXE), false),
		fuzzcorpus.E("http-solicit", solicit, false),
		fuzzcorpus.E("ipxe-inforeq", pkt(dhcpv6.MessageTypeInformationRequest, kindIPXE), false),
		fuzzcorpus.E("ipxe-request", pkt(dhcpv6.MessageTypeRequest, kindIPXE), false),
		fuzzcorpus.E("arm64-solicit", pkt(dhcpv6.MessageTypeSolicit, kindARM64), false),
		fuzzcorpus.E("bios-solicit", pkt(dhcpv6.MessageTypeSolicit, kindBIOS), false),
		fuzzcorpus.E("plain-solicit-rapid", pkt(dhcpv6.MessageTypeSolicit, kindPlain, dhcpv6.WithRapidCommit), false),
		fuzzcorpus.E("plain-renew", pkt(dhcpv6.MessageTypeRenew, kindPlain, withIAAddr("fd00:199::dead")), false),
		fuzzcorpus.E("plain-rebind", pkt(dhcpv6.MessageTypeRebind, kindPlain), false),
		fuzzcorpus.E("plain-release", pkt(dhcpv6.MessageTypeRelease, kindPlain), false),
		fuzzcorpus.E("plain-decline", pkt(dhcpv6.MessageTypeDecline, kindPlain), false),
		fuzzcorpus.E("plain-confirm", pkt(dhcpv6.MessageTypeConfirm, kindPlain, withIAAddr("fd00:200::1")), false),
		fuzzcorpus.E("edk2-bootserver-request", pkt(dhcpv6.MessageTypeRequest, kindPXE, withoutOption6(dhcpv6.OptionIANA)), true),
		fuzzcorpus.E("relay-forw", relay.ToBytes(), false),
		fuzzcorpus.E("relay-nested", nested.ToBytes(), false),
		fuzzcorpus.E("relay-empty", emptyRelay, false),
		fuzzcorpus.E("option-overrun", overrun, false),
		fuzzcorpus.E("truncated", solicit[:3], false),
		fuzzcorpus.E("empty", []byte{}, false),
	}
}

// FuzzAnswer6 feeds datagrams to the DHCPv6 server's handler in both modes: garbage is
// dropped, and every answer parses, answers the request's transaction with our server
// ID and the client's ID, carries only configured boot URLs and, in full mode, only
// addresses of the prefix (none at all in information mode).
func FuzzAnswer6(f *testing.F) {
	fuzzcorpus.Seed(f, dhcpv6Seeds(f)...)

	src := netip.MustParseAddrPort("[fe80::5054:ff:fe12:3456%vs0]:546")

	var servers []*DHCPv6

	for _, full := range []bool{false, true} {
		for _, arm64 := range []bool{false, true} {
			servers = append(servers, testDHCPv6(testConfig6(f, full, arm64), zap.NewNop()))
		}
	}

	f.Fuzz(func(t *testing.T, pkt []byte, bootPort bool) {
		for _, s := range servers {
			cfg := &s.cfg

			out, dst := s.handle(pkt, src, bootPort)
			if out == nil {
				continue
			}

			if dst.Addr() != src.Addr() || (dst.Port() != dhcpv6ClientPort && dst.Port() != dhcpv6ServerPort) || (bootPort && dst != src) {
				t.Fatalf("reply to %s", dst)
			}

			in, err := dhcpv6.FromBytes(pkt)
			if err != nil {
				t.Fatalf("answered a packet that does not parse: %v", err)
			}

			resp, err := dhcpv6.FromBytes(out)
			if err != nil {
				t.Fatalf("reply does not parse: %v", err)
			}

			if in.IsRelay() != resp.IsRelay() {
				t.Fatalf("reply %s to %s", resp, in)
			}

			req, err := in.GetInnerMessage()
			if err != nil {
				t.Fatal(err)
			}

			reply, err := resp.GetInnerMessage()
			if err != nil {
				t.Fatal(err)
			}

			checkReply6(t, cfg, req, reply)
		}
	})
}

func checkReply6(t *testing.T, cfg *DHCPv6Config, req, reply *dhcpv6.Message) {
	t.Helper()

	if reply.TransactionID != req.TransactionID {
		t.Fatalf("reply xid %s to request xid %s", reply.TransactionID, req.TransactionID)
	}

	if reply.MessageType != dhcpv6.MessageTypeAdvertise && reply.MessageType != dhcpv6.MessageTypeReply {
		t.Fatalf("reply of type %s", reply.MessageType)
	}

	if sid := reply.GetOneOption(dhcpv6.OptionServerID); sid == nil || !bytes.Equal(sid.ToBytes(), cfg.serverID) {
		t.Fatalf("reply with server ID %v", sid)
	}

	cid, rcid := req.GetOneOption(dhcpv6.OptionClientID), reply.GetOneOption(dhcpv6.OptionClientID)
	if (cid == nil) != (rcid == nil) || (cid != nil && !bytes.Equal(cid.ToBytes(), rcid.ToBytes())) {
		t.Fatalf("client ID %v answered with %v", cid, rcid)
	}

	allowed := []string{"", cfg.ScriptURL, cfg.HTTPBootURL + cfg.UEFIBootFile, cfg.TFTPBootURL + cfg.UEFIBootFile}
	if cfg.ARM64BootFile != "" {
		allowed = append(allowed, cfg.HTTPBootURL+cfg.ARM64BootFile, cfg.TFTPBootURL+cfg.ARM64BootFile)
	}

	if url := reply.Options.BootFileURL(); !slices.Contains(allowed, url) {
		t.Fatalf("boot URL %q not one of %v", url, allowed)
	}

	if cfg.Pool == nil && reply.MessageType == dhcpv6.MessageTypeAdvertise && len(reply.Options.IANA()) > 0 {
		t.Fatalf("information mode ADVERTISE with an IA_NA, which EDK2 drops")
	}

	for _, ia := range reply.Options.IANA() {
		for _, a := range ia.Options.Addresses() {
			addr, ok := netip.AddrFromSlice(a.IPv6Addr)

			switch {
			case cfg.Pool == nil:
				t.Fatalf("information mode handed out %s", a.IPv6Addr)
			case a.ValidLifetime == 0:
				// The client's own address, withdrawn.
			case !ok || !cfg.Pool.Prefix.Contains(addr) || addr == cfg.ServerAddr:
				t.Fatalf("handed out %s", a.IPv6Addr)
			}
		}
	}
}
