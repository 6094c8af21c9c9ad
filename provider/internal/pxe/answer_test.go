package pxe

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	testScriptURL   = "http://10.199.0.1:50042/ipxe/start.ipxe"
	testHTTPBootURL = "http://10.199.0.1:50042/boot/"
)

var (
	testMAC  = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	testGUID = append([]byte{0}, make([]byte, 16)...)
)

func testConfig(t testing.TB, arm64 bool) *Config {
	t.Helper()

	cfg := &Config{ServerIP: netip.MustParseAddr("10.199.0.1"), ScriptURL: testScriptURL}
	if arm64 {
		cfg.ARM64BootFile = "ipxe-arm64.efi"
	}

	require.NoError(t, cfg.Validate())

	return cfg
}

// pxeRequest builds a PXE client request; arch < 0 leaves option 93 out.
func pxeRequest(t testing.TB, mt dhcpv4.MessageType, arch int, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()

	all := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(mt),
		dhcpv4.WithHwAddr(testMAC),
		dhcpv4.WithBroadcast(true),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
	}
	if arch >= 0 {
		all = append(all, dhcpv4.WithOption(dhcpv4.OptClientArch(iana.Arch(arch))))
	}

	req, err := dhcpv4.New(append(all, mods...)...)
	require.NoError(t, err)

	return req
}

// httpBootRequest builds a UEFI HTTP boot client's request, as OVMF sends it.
func httpBootRequest(t testing.TB, mt dhcpv4.MessageType, arch iana.Arch) *dhcpv4.DHCPv4 {
	t.Helper()

	req, err := dhcpv4.New(dhcpv4.WithMessageType(mt), dhcpv4.WithHwAddr(testMAC), dhcpv4.WithBroadcast(true),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(fmt.Sprintf("HTTPClient:Arch:%05d:UNDI:003001", arch))),
		dhcpv4.WithOption(dhcpv4.OptClientArch(arch)))
	require.NoError(t, err)

	return req
}

var (
	withIPXE   = dhcpv4.WithOption(dhcpv4.OptUserClass("iPXE"))
	withGUID   = dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, testGUID)
	withUsAsID = dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 199, 0, 1)))
)

func TestAnswer(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name     string
		arm64    bool
		httpBoot bool // the provider serves HTTP boot
		uki      bool // the provider builds arm64 UKIs
		bootPort bool
		req      func(t *testing.T) *dhcpv4.DHCPv4
		wantType dhcpv4.MessageType
		wantFile string
		wantErr  error
		wantGUID bool
	}{
		{
			name:     "BIOS discover",
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 0) },
			wantType: dhcpv4.MessageTypeOffer, wantFile: "undionly.kpxe",
		},
		{
			name:     "BIOS without option 93 uses the vendor class arch",
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, -1) },
			wantType: dhcpv4.MessageTypeOffer, wantFile: "undionly.kpxe",
		},
		{
			name:     "UEFI EFI BC (7)",
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 7) },
			wantType: dhcpv4.MessageTypeOffer, wantFile: DefaultUEFIBootFile,
		},
		{
			name:     "UEFI x86-64 (9)",
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 9) },
			wantType: dhcpv4.MessageTypeOffer, wantFile: DefaultUEFIBootFile,
		},
		{
			name:     "UEFI IA32 (6)",
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 6) },
			wantType: dhcpv4.MessageTypeOffer, wantFile: DefaultUEFIBootFile,
		},
		{
			name:     "arm64 with binary",
			arm64:    true,
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 11) },
			wantType: dhcpv4.MessageTypeOffer, wantFile: "ipxe-arm64.efi",
		},
		{
			name:    "arm64 without binary",
			req:     func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 11) },
			wantErr: errNoARM64,
		},
		{
			name:     "arm64 iPXE without binary gets the script",
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 11, withIPXE) },
			wantType: dhcpv4.MessageTypeOffer, wantFile: testScriptURL,
		},
		{
			name:     "iPXE ROM under BIOS",
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 0, withIPXE) },
			wantType: dhcpv4.MessageTypeOffer, wantFile: testScriptURL,
		},
		{
			name: "chainloaded iPXE under UEFI (RFC 3004 user class)",
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return pxeRequest(t, dhcpv4.MessageTypeDiscover, 9,
					dhcpv4.WithOption(dhcpv4.OptRFC3004UserClass([]string{"iPXE"})))
			},
			wantType: dhcpv4.MessageTypeOffer, wantFile: testScriptURL,
		},
		{
			name:    "HTTP boot arch from a PXEClient cannot take a TFTP file",
			req:     func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 16) },
			wantErr: errUnknownArch,
		},
		{
			name: "UEFI HTTP boot, none configured",
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return httpBootRequest(t, dhcpv4.MessageTypeDiscover, iana.EFI_X86_64_HTTP)
			},
			wantErr: errHTTPBoot,
		},
		{
			name:     "UEFI HTTP boot x86-64 (16)",
			httpBoot: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return httpBootRequest(t, dhcpv4.MessageTypeDiscover, iana.EFI_X86_64_HTTP)
			},
			wantType: dhcpv4.MessageTypeOffer, wantFile: testHTTPBootURL + DefaultUEFIBootFile,
		},
		{
			name:     "UEFI HTTP boot REQUEST on port 4011",
			httpBoot: true,
			bootPort: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return httpBootRequest(t, dhcpv4.MessageTypeRequest, iana.EFI_X86_64_HTTP)
			},
			wantType: dhcpv4.MessageTypeAck, wantFile: testHTTPBootURL + DefaultUEFIBootFile,
		},
		{
			name:     "UEFI HTTP boot arm64 (19)",
			arm64:    true,
			httpBoot: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return httpBootRequest(t, dhcpv4.MessageTypeDiscover, iana.EFI_ARM64_HTTP)
			},
			wantType: dhcpv4.MessageTypeOffer, wantFile: testHTTPBootURL + "ipxe-arm64.efi",
		},
		{
			name:     "UEFI HTTP boot arm64 without binary",
			httpBoot: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return httpBootRequest(t, dhcpv4.MessageTypeDiscover, iana.EFI_ARM64_HTTP)
			},
			wantErr: errNoARM64,
		},
		{
			name:     "UEFI HTTP boot arm64 gets its own UKI",
			httpBoot: true, uki: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				req := httpBootRequest(t, dhcpv4.MessageTypeDiscover, iana.EFI_ARM64_HTTP)
				// As OVMF/AAVMF send the SMBIOS UUID 01020304-0506-0708-090a-0b0c0d0e0f10.
				req.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier,
					[]byte{0, 4, 3, 2, 1, 6, 5, 8, 7, 9, 10, 11, 12, 13, 14, 15, 16}))

				return req
			},
			wantType: dhcpv4.MessageTypeOffer,
			wantFile: testHTTPBootURL + "uki/arm64/01020304-0506-0708-090a-0b0c0d0e0f10/52-54-00-12-34-56/boot.efi",
		},
		{
			name:     "UEFI HTTP boot arm64 UKI without a UUID",
			httpBoot: true, uki: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return httpBootRequest(t, dhcpv4.MessageTypeDiscover, iana.EFI_ARM64_HTTP)
			},
			wantType: dhcpv4.MessageTypeOffer,
			wantFile: testHTTPBootURL + "uki/arm64/00000000-0000-0000-0000-000000000000/52-54-00-12-34-56/boot.efi",
		},
		{
			name:     "arm64 PXE (11) gets no UKI: it cannot take a URL",
			httpBoot: true, uki: true,
			req:     func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 11) },
			wantErr: errNoARM64,
		},
		{
			name:     "HTTPClient saying BIOS",
			httpBoot: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return httpBootRequest(t, dhcpv4.MessageTypeDiscover, iana.INTEL_X86PC)
			},
			wantErr: errUnknownArch,
		},
		{
			name:    "unknown arch",
			req:     func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 2) },
			wantErr: errUnknownArch,
		},
		{
			name: "non-PXE discover",
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				req, err := dhcpv4.NewDiscovery(testMAC, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("MSFT 5.0")))
				require.NoError(t, err)

				return req
			},
			wantErr: errNotPXE,
		},
		{
			name: "REQUEST to us gets an ACK with option 97",
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return pxeRequest(t, dhcpv4.MessageTypeRequest, 9, withUsAsID, withGUID)
			},
			wantType: dhcpv4.MessageTypeAck, wantFile: DefaultUEFIBootFile, wantGUID: true,
		},
		{
			name: "REQUEST to the site server",
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return pxeRequest(t, dhcpv4.MessageTypeRequest, 9, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 199, 0, 2))))
			},
			wantErr: errNotForUs,
		},
		{
			name:     "REQUEST on port 4011",
			bootPort: true,
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return pxeRequest(t, dhcpv4.MessageTypeRequest, 0, dhcpv4.WithClientIP(net.IPv4(10, 199, 0, 50)))
			},
			wantType: dhcpv4.MessageTypeAck, wantFile: "undionly.kpxe",
		},
		{
			name:     "discover echoes option 97",
			req:      func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 7, withGUID) },
			wantType: dhcpv4.MessageTypeOffer, wantFile: DefaultUEFIBootFile, wantGUID: true,
		},
		{
			name:    "RELEASE ignored",
			req:     func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeRelease, 0) },
			wantErr: errMessageType,
		},
		{
			name: "odd-length option 93",
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return pxeRequest(t, dhcpv4.MessageTypeDiscover, -1, dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0}))
			},
			wantErr: ErrMalformed,
		},
		{
			name: "garbage vendor class arch",
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return pxeRequest(t, dhcpv4.MessageTypeDiscover, -1, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:0x0zz")))
			},
			wantErr: ErrMalformed,
		},
		{
			name: "PXEClient with no arch at all",
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				return pxeRequest(t, dhcpv4.MessageTypeDiscover, -1, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")))
			},
			wantErr: errNoArch,
		},
		{
			name: "BOOTREPLY ignored",
			req: func(t *testing.T) *dhcpv4.DHCPv4 {
				req := pxeRequest(t, dhcpv4.MessageTypeDiscover, 0)
				req.OpCode = dhcpv4.OpcodeBootReply

				return req
			},
			wantErr: errNotBootRequest,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			cfg := testConfig(t, tc.arm64)
			if tc.httpBoot {
				cfg.HTTPBootURL = testHTTPBootURL
				cfg.ARM64UKI = tc.uki
				require.NoError(t, cfg.Validate())
			}

			req := tc.req(t)

			resp, err := answer(cfg, req, tc.bootPort)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				assert.Nil(t, resp)

				if tc.wantErr != ErrMalformed {
					assert.ErrorIs(t, err, ErrIgnore)
				}

				return
			}

			require.NoError(t, err)

			// Through the wire format, as a client sees it.
			resp, err = dhcpv4.FromBytes(resp.ToBytes())
			require.NoError(t, err)

			assert.Equal(t, tc.wantType, resp.MessageType())
			assert.Equal(t, dhcpv4.OpcodeBootReply, resp.OpCode)
			assert.Equal(t, req.TransactionID, resp.TransactionID)
			assert.Equal(t, testMAC, resp.ClientHWAddr)
			assert.True(t, resp.YourIPAddr.Equal(net.IPv4zero), "yiaddr must be 0")
			assert.True(t, resp.ServerIPAddr.Equal(net.IPv4(10, 199, 0, 1)), "siaddr")
			assert.Equal(t, "10.199.0.1", resp.ServerHostName)
			assert.Equal(t, tc.wantFile, resp.BootFileName)
			assert.Equal(t, tc.wantFile, resp.BootFileNameOption())
			assert.Equal(t, "10.199.0.1", resp.TFTPServerName())

			// UEFI 2.5+ takes an HTTP boot offer only if it says HTTPClient; PXE discovery
			// control is for PXE clients.
			if tc.httpBoot {
				assert.Equal(t, "HTTPClient", resp.ClassIdentifier())
				assert.Nil(t, resp.Options.Get(dhcpv4.OptionVendorSpecificInformation))
			} else {
				assert.Equal(t, "PXEClient", resp.ClassIdentifier())
				assert.Equal(t, []byte{6, 1, 8, 0xff}, resp.Options.Get(dhcpv4.OptionVendorSpecificInformation))
			}

			assert.True(t, resp.ServerIdentifier().Equal(net.IPv4(10, 199, 0, 1)))

			if guid := req.Options.Get(dhcpv4.OptionClientMachineIdentifier); tc.wantGUID || guid != nil {
				require.NotNil(t, guid, "a row that wants option 97 back sends one")
				assert.Equal(t, guid, resp.Options.Get(dhcpv4.OptionClientMachineIdentifier), "option 97 comes back")
			} else {
				assert.Nil(t, resp.Options.Get(dhcpv4.OptionClientMachineIdentifier))
			}
		})
	}
}

func TestReplyTo(t *testing.T) {
	t.Parallel()

	cfg := testConfig(t, false)
	src := netip.MustParseAddrPort("10.199.0.50:68")

	for _, tc := range []struct {
		name     string
		mods     []dhcpv4.Modifier
		bootPort bool
		want     string
	}{
		{name: "broadcast while ciaddr is 0", want: "255.255.255.255:68"},
		{name: "unicast to ciaddr", mods: []dhcpv4.Modifier{dhcpv4.WithClientIP(net.IPv4(10, 199, 0, 50))}, want: "10.199.0.50:68"},
		{name: "relay", mods: []dhcpv4.Modifier{dhcpv4.WithGatewayIP(net.IPv4(10, 199, 1, 1))}, want: "10.199.1.1:67"},
		{
			name: "relay wins over ciaddr",
			mods: []dhcpv4.Modifier{dhcpv4.WithGatewayIP(net.IPv4(10, 199, 1, 1)), dhcpv4.WithClientIP(net.IPv4(10, 199, 0, 50))},
			want: "10.199.1.1:67",
		},
		{name: "port 4011 back to the sender", bootPort: true, want: "10.199.0.50:68"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			req := pxeRequest(t, dhcpv4.MessageTypeDiscover, 0, tc.mods...)
			assert.Equal(t, tc.want, ReplyTo(cfg, req, src, tc.bootPort).String())

			if !tc.bootPort {
				resp, err := answer(cfg, req, false)
				require.NoError(t, err)
				// The relay address is echoed so the relay can forward the reply.
				assert.True(t, resp.GatewayIPAddr.Equal(req.GatewayIPAddr))
			}
		})
	}
}

func TestClientArch(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		code           iana.Arch
		ok             bool
		arch, firmware string
	}{
		{0, true, ArchAMD64, FirmwareBIOS},
		{6, true, ArchAMD64, FirmwareUEFI},
		{7, true, ArchAMD64, FirmwareUEFI},
		{9, true, ArchAMD64, FirmwareUEFI},
		{11, true, ArchARM64, FirmwareUEFI},
		{16, true, ArchAMD64, FirmwareUEFI},
		{19, true, ArchARM64, FirmwareUEFI},
		{1, false, "", ""},
		{10, false, "", ""},
		{0xffff, false, "", ""},
	} {
		ca, ok := ClientArchFromCode(tc.code)
		assert.Equal(t, tc.ok, ok, "code %d", tc.code)
		assert.Equal(t, tc.arch, ca.Arch, "code %d", tc.code)
		assert.Equal(t, tc.firmware, ca.Firmware, "code %d", tc.code)
	}
}

func TestAnswerMalformedBytes(t *testing.T) {
	t.Parallel()

	good := pxeRequest(t, dhcpv4.MessageTypeDiscover, 0).ToBytes()

	for _, tc := range []struct {
		name string
		pkt  []byte
	}{
		{"empty", nil},
		{"truncated header", good[:100]},
		{"no cookie", good[:236]},
		{"bad cookie", append(append([]byte{}, good[:236]...), 1, 2, 3, 4)},
		{"truncated option", append(append([]byte{}, good[:240]...), 60, 20, 'P')},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			p := testProxy(*testConfig(t, false), NewMetrics(nil).dhcp("proxy"), NewMetrics(nil).dhcp("bootserver"))
			out, _ := p.handle(tc.pkt, netip.MustParseAddrPort("10.199.0.50:68"), false)
			assert.Nil(t, out)
		})
	}
}

func BenchmarkHandle(b *testing.B) {
	cfg := testConfig(b, false)
	p := testProxy(*cfg, NewMetrics(nil).dhcp("proxy"), NewMetrics(nil).dhcp("bootserver"))
	pkt := pxeRequest(b, dhcpv4.MessageTypeDiscover, 9, withGUID).ToBytes()
	src := netip.MustParseAddrPort("10.199.0.50:68")

	b.ReportAllocs()

	for b.Loop() {
		if out, _ := p.handle(pkt, src, false); out == nil {
			b.Fatal("no answer")
		}
	}
}

func TestGUIDString(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		guid []byte
		want string
	}{
		{"swapped fields", []byte{0, 0x78, 0x56, 0x34, 0x12, 0xbc, 0x9a, 0xf0, 0xde, 1, 2, 3, 4, 5, 6, 7, 8}, "12345678-9abc-def0-0102-030405060708"},
		{"absent", nil, nullUUID},
		{"short", []byte{0, 1, 2}, nullUUID},
		{"not type 0", append([]byte{1}, make([]byte, 16)...), nullUUID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, GUIDString(tc.guid))
		})
	}
}
