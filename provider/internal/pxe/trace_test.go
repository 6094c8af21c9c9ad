package pxe

import (
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
)

func TestClientMachineID(t *testing.T) {
	t.Parallel()

	// iPXE's ${uuid} 4c4c4544-0042-3510-8052-b4c04f4e3732 (a Dell's), as iPXE and UEFI
	// send it in option 97: the first three fields little-endian.
	wire := []byte{0, 0x44, 0x45, 0x4c, 0x4c, 0x42, 0x00, 0x10, 0x35, 0x80, 0x52, 0xb4, 0xc0, 0x4f, 0x4e, 0x37, 0x32}

	ff := append([]byte{0}, make([]byte, 16)...)
	for i := 1; i < len(ff); i++ {
		ff[i] = 0xff
	}

	for _, tc := range []struct {
		name string
		opt  []byte
		want string
	}{
		{"a UUID", wire, "4c4c4544-0042-3510-8052-b4c04f4e3732"},
		{"null", testGUID, ""},
		{"all ones", ff, ""},
		{"short", wire[:16], ""},
		{"not type 0", append([]byte{1}, wire[1:]...), ""},
		{"absent", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			var mods []dhcpv4.Modifier
			if tc.opt != nil {
				mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, tc.opt))
			}

			assert.Equal(t, tc.want, clientMachineID(pxeRequest(t, dhcpv4.MessageTypeDiscover, 7, mods...)))
		})
	}
}

// An offer marks the machine's boot timeline; what is not answered marks nothing.
func TestOffersAreTraced(t *testing.T) {
	t.Parallel()

	const id = "4c4c4544-0042-3510-8052-b4c04f4e3732"

	wire := []byte{0, 0x44, 0x45, 0x4c, 0x4c, 0x42, 0x00, 0x10, 0x35, 0x80, 0x52, 0xb4, 0xc0, 0x4f, 0x4e, 0x37, 0x32}
	withID := dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, wire)

	trace := boottrace.New(nil)
	cfg := testConfig(t, false)
	cfg.Trace = trace

	p := testProxy(*cfg, NewMetrics(nil).dhcp("proxy"), NewMetrics(nil).dhcp("bootserver"))
	src := netip.MustParseAddrPort("10.199.0.50:68")

	// A request for another server's offer is not answered.
	out, _ := p.handle(pxeRequest(t, dhcpv4.MessageTypeRequest, 7, withID).ToBytes(), src, false)
	require.Nil(t, out)
	assert.Nil(t, trace.Timeline(id))

	out, _ = p.handle(pxeRequest(t, dhcpv4.MessageTypeDiscover, 7, withID).ToBytes(), src, false)
	require.NotNil(t, out)

	marks := trace.Timeline(id)
	require.Len(t, marks, 1)
	assert.Equal(t, boottrace.PhaseDHCP, marks[0].Phase)
	assert.Equal(t, "proxy", marks[0].Detail)
	assert.Equal(t, FirmwareUEFI, marks[0].Firmware)

	// Without option 97 the offer waits for the script its MAC fetches.
	const other = "4c4c4544-0000-1000-8000-0000000000a1"

	out, _ = p.handle(pxeRequest(t, dhcpv4.MessageTypeDiscover, 0, dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, 0, 1})).ToBytes(), src, false)
	require.NotNil(t, out)
	trace.MarkScript(other, "02:00:00:00:00:01", "10.199.0.51", FirmwareBIOS, "agent")

	marks = trace.Timeline(other)
	require.Len(t, marks, 2)
	assert.Equal(t, boottrace.PhaseDHCP, marks[0].Phase)
	assert.Equal(t, FirmwareBIOS, marks[0].Firmware)
}

// The full DHCP server marks offers with boot options only: a client that is not PXE
// (Talos itself, once booted) gets an address and no mark.
func TestFullDHCPOffersAreTraced(t *testing.T) {
	t.Parallel()

	trace := boottrace.New(nil)
	cfg := testPoolConfig()
	cfg.ServerIP = testServerIP
	cfg.Trace = trace
	require.NoError(t, cfg.Validate())

	s := newDHCPServer(cfg, memLeases{}, zapNop(), NewMetrics(nil).dhcp("dhcp"))
	src := netip.MustParseAddrPort("0.0.0.0:68")

	plain, err := dhcpv4.NewDiscovery(net.HardwareAddr{2, 0, 0, 0, 0, 2})
	require.NoError(t, err)

	out, _ := s.handle(t.Context(), plain.ToBytes(), src)
	require.NotNil(t, out)

	out, _ = s.handle(t.Context(), pxeRequest(t, dhcpv4.MessageTypeDiscover, 7).ToBytes(), src)
	require.NotNil(t, out)

	const (
		plainID = "4c4c4544-0000-1000-8000-0000000000b1"
		pxeID   = "4c4c4544-0000-1000-8000-0000000000b2"
	)

	trace.MarkScript(plainID, "02:00:00:00:00:02", "10.199.0.100", FirmwareUEFI, "agent")
	trace.MarkScript(pxeID, testMAC.String(), "10.199.0.101", FirmwareUEFI, "agent")

	assert.Len(t, trace.Timeline(plainID), 1, "no offer marked for a client that is not PXE")

	marks := trace.Timeline(pxeID)
	require.Len(t, marks, 2)
	assert.Equal(t, "dhcp", marks[0].Detail)
}
