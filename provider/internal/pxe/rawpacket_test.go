package pxe

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomRequest builds a request from a random mix of what PXE firmware, iPXE, relays
// and other DHCP clients send.
func randomRequest(t *testing.T, rng *rand.Rand) []byte {
	t.Helper()

	pick := func(n int) int { return rng.IntN(n) }

	mts := []dhcpv4.MessageType{
		dhcpv4.MessageTypeDiscover, dhcpv4.MessageTypeDiscover, dhcpv4.MessageTypeRequest, dhcpv4.MessageTypeRequest,
		dhcpv4.MessageTypeInform, dhcpv4.MessageTypeRelease, dhcpv4.MessageTypeNone,
	}

	var mods []dhcpv4.Modifier

	if mt := mts[pick(len(mts))]; mt != dhcpv4.MessageTypeNone {
		mods = append(mods, dhcpv4.WithMessageType(mt))
	}

	mods = append(mods, dhcpv4.WithHwAddr(net.HardwareAddr{0x52, 0x54, 0, byte(pick(256)), byte(pick(256)), byte(pick(256))}),
		dhcpv4.WithTransactionID(dhcpv4.TransactionID{byte(pick(256)), byte(pick(256)), byte(pick(256)), byte(pick(256))}),
		dhcpv4.WithBroadcast(pick(2) == 0))

	vendorClasses := []string{
		"PXEClient:Arch:00000:UNDI:002001", "PXEClient:Arch:00007:UNDI:003016", "PXEClient:Arch:00011:UNDI:003000",
		"PXEClient:Arch:00016:UNDI:003001", "PXEClient:Arch:0000x:UNDI:002001", "PXEClient", "HTTPClient:Arch:00016", "HTTPClient:Arch:00019:UNDI:003000", "MSFT 5.0", "",
	}
	if vc := vendorClasses[pick(len(vendorClasses)+1)%len(vendorClasses)]; vc != "" || pick(2) == 0 {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClassIdentifier(vc)))
	}

	switch pick(4) {
	case 0: // no option 93
	case 1:
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 1, 2})) // malformed
	default:
		arches := []iana.Arch{0, 6, 7, 9, 11, 16, 19, 2, 99}
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClientArch(arches[pick(len(arches))])))
	}

	if pick(2) == 0 {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptUserClass([]string{"iPXE", "xiPXEx", "other"}[pick(3)])))
	}

	switch pick(4) {
	case 0:
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, append([]byte{0}, bytes.Repeat([]byte{byte(pick(256))}, 16)...)))
	case 1:
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, []byte{0, 1, 2}))
	}

	if pick(3) == 0 {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientIdentifier, []byte{1, 0x52, 0x54, 0, 1, 2, byte(pick(256))}))
	}

	if pick(3) == 0 {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionRelayAgentInformation, []byte{1, 4, 'e', 't', 'h', byte('0' + pick(10))}),
			func(d *dhcpv4.DHCPv4) { d.GatewayIPAddr = net.IPv4(10, 200, 0, byte(1+pick(254))) })
	}

	switch pick(4) {
	case 0:
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 199, 0, 1))))
	case 1:
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 199, 0, 2))))
	}

	if pick(3) == 0 {
		mods = append(mods, func(d *dhcpv4.DHCPv4) { d.ClientIPAddr = net.IPv4(10, 199, 0, byte(pick(256))) })
	}

	if pick(4) == 0 {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(strings.Repeat("h", pick(300)))))
	}

	req, err := dhcpv4.New(mods...)
	require.NoError(t, err)

	if pick(6) == 0 {
		req.OpCode = dhcpv4.OpcodeBootReply
	}

	pkt := req.ToBytes()

	switch pick(8) {
	case 0:
		pkt[offHLen] = byte(pick(256)) // any length, 16 bytes at most count
	case 1:
		pkt = pkt[:offOptions] // no options at all
	}

	return pkt
}

// mutate damages a packet the way a fuzzer would: flipped, cut, repeated bytes.
func mutate(rng *rand.Rand, pkt []byte) []byte {
	pkt = bytes.Clone(pkt)

	switch rng.IntN(4) {
	case 0:
		for range 1 + rng.IntN(4) {
			pkt[rng.IntN(len(pkt))] = byte(rng.IntN(256))
		}
	case 1:
		pkt = pkt[:rng.IntN(len(pkt)+1)]
	case 2:
		i := offOptions + rng.IntN(max(len(pkt)-offOptions, 1))
		j := min(i+rng.IntN(20), len(pkt))
		pkt = append(pkt[:j:j], pkt[i:]...) // a run of options twice
	default:
		// Options after the end, and padding inside.
		pkt = append(pkt, 0, 0, 60, 3, 'a', 'b', 'c')
	}

	return pkt
}

func testConfigs(t *testing.T) []*Config {
	t.Helper()

	long := &Config{ServerIP: netip.MustParseAddr("10.199.0.1"), ScriptURL: "http://10.199.0.1:50042/ipxe/" + strings.Repeat("s", 300) + ".ipxe"}
	require.NoError(t, long.Validate())

	mid := &Config{ServerIP: netip.MustParseAddr("10.199.0.1"), ScriptURL: "http://10.199.0.1:50042/" + strings.Repeat("m", 110), DHCPPort: 1067}
	require.NoError(t, mid.Validate())

	httpBoot := testConfig(t, true)
	httpBoot.HTTPBootURL = testHTTPBootURL
	require.NoError(t, httpBoot.Validate())

	uki := testConfig(t, false)
	uki.HTTPBootURL = testHTTPBootURL
	uki.ARM64UKI = true
	require.NoError(t, uki.Validate())

	return []*Config{testConfig(t, false), testConfig(t, true), long, mid, httpBoot, uki}
}

// The replies read in place must be, byte for byte, those of the decoded way, for every
// request; and counted the same.
func TestRawAnswersMatchDecoded(t *testing.T) {
	t.Parallel()

	rng := rand.New(rand.NewPCG(7, 15)) // a fixed, reproducible mix
	src := netip.MustParseAddrPort("10.199.0.50:68")
	cfgs := testConfigs(t)

	var taken, answered int

	buf := make([]byte, 0, maxPacket)

	for i := range 6000 {
		pkt := randomRequest(t, rng)
		if i%2 == 1 {
			pkt = mutate(rng, pkt)
		}

		cfg := cfgs[rng.IntN(len(cfgs))]
		bootPort := rng.IntN(3) == 0

		fastM, slowM := NewMetrics(nil), NewMetrics(nil)
		fast := testProxy(*cfg, fastM.dhcp("proxy"), fastM.dhcp("bootserver"))
		slow := testProxy(*cfg, slowM.dhcp("proxy"), slowM.dhcp("bootserver"))

		var req rawRequest
		if req.parse(pkt) {
			taken++
		}

		gotOut, gotDst := fast.handleInto(pkt, buf, src, bootPort)
		wantOut, wantDst := slow.handleDecoded(pkt, src, bootPort)

		require.Equal(t, wantOut, gotOut, "packet %x, boot port %v", pkt, bootPort)
		require.Equal(t, wantDst, gotDst, "packet %x", pkt)

		if wantOut != nil {
			answered++
		}

		for _, c := range [][2]*dhcpCounters{{fast.dhcp, slow.dhcp}, {fast.boot, slow.boot}} {
			for _, pair := range [][2]prometheus.Counter{
				{c[0].received, c[1].received}, {c[0].malformed, c[1].malformed}, {c[0].offer, c[1].offer}, {c[0].ack, c[1].ack},
			} {
				require.Equal(t, rawCount(t, pair[1]), rawCount(t, pair[0]), "packet %x", pkt)
			}
		}
	}

	// The mix must exercise the raw reader, and answers.
	assert.Greater(t, taken, 3000)
	assert.Greater(t, answered, 300)
}

func rawCount(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()

	var m dto.Metric
	require.NoError(t, c.Write(&m))

	return m.GetCounter().GetValue()
}

func TestRawParseRefuses(t *testing.T) {
	t.Parallel()

	good := pxeRequest(t, dhcpv4.MessageTypeDiscover, 0).ToBytes()

	twice := append(bytes.Clone(good[:offOptions]), 53, 1, 1, 53, 1, 1, 255)
	noEnd := append(bytes.Clone(good[:offOptions]), 53, 1, 1)
	overrun := append(bytes.Clone(good[:offOptions]), 60, 20, 'P')
	lonely := append(bytes.Clone(good[:offOptions]), 60)
	badCookie := bytes.Clone(good)
	binary.BigEndian.PutUint32(badCookie[offOptions-4:], 1)

	for name, pkt := range map[string][]byte{
		"short": good[:offOptions-1], "bad cookie": badCookie, "repeated option": twice,
		"no end": noEnd, "overrun": overrun, "code without length": lonely,
	} {
		var req rawRequest
		assert.False(t, req.parse(pkt), name)
	}

	var req rawRequest
	require.True(t, req.parse(good))
	assert.Equal(t, dhcpv4.MessageTypeDiscover, req.messageType())
	assert.Equal(t, []byte(testMAC), req.hwAddr())
}

func TestMACString(t *testing.T) {
	t.Parallel()

	for _, hw := range []net.HardwareAddr{nil, testMAC, {0xff, 0, 0xab, 1, 2, 0xcd}, make(net.HardwareAddr, 16), {1, 2, 3}} {
		assert.Equal(t, hw.String(), macString(hw))
	}
}

func BenchmarkHandleDecoded(b *testing.B) {
	cfg := testConfig(b, false)
	p := testProxy(*cfg, NewMetrics(nil).dhcp("proxy"), NewMetrics(nil).dhcp("bootserver"))
	pkt := pxeRequest(b, dhcpv4.MessageTypeDiscover, 9, withGUID).ToBytes()
	src := netip.MustParseAddrPort("10.199.0.50:68")

	b.ReportAllocs()

	for b.Loop() {
		if out, _ := p.handleDecoded(pkt, src, false); out == nil {
			b.Fatal("no answer")
		}
	}
}

func BenchmarkHandleInto(b *testing.B) {
	cfg := testConfig(b, false)
	p := testProxy(*cfg, NewMetrics(nil).dhcp("proxy"), NewMetrics(nil).dhcp("bootserver"))
	pkt := pxeRequest(b, dhcpv4.MessageTypeDiscover, 9, withGUID).ToBytes()
	src := netip.MustParseAddrPort("10.199.0.50:68")
	buf := make([]byte, 0, maxPacket)

	b.ReportAllocs()

	for b.Loop() {
		if out, _ := p.handleInto(pkt, buf, src, false); out == nil {
			b.Fatal("no answer")
		}
	}
}
