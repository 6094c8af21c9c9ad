package pxe

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

const (
	testScriptURL6   = "http://[fd00:199::1]:50042/ipxe/start.ipxe"
	testHTTPBootURL6 = "http://[fd00:199::1]:50042/boot/"
	testTFTPBootURL6 = "tftp://[fd00:199::1]/"
)

var (
	testServerIP6   = netip.MustParseAddr("fd00:199::1")
	testPrefix6     = netip.MustParsePrefix("fd00:199::/64")
	testDNS6        = netip.MustParseAddr("fd00:199::53")
	testServerDUID6 = &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}}
	testClientDUID6 = &dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: 1234, LinkLayerAddr: testMAC}
	testIAID6       = [4]byte{0, 0, 0, 7}
	testXID6        = dhcpv6.TransactionID{0x5e, 0xed, 0x06}
)

// testConfig6 is a validated DHCPv6 configuration: full mode with a pool, else
// information mode; arm64 configures an arm64 boot file.
func testConfig6(t testing.TB, full, arm64 bool) *DHCPv6Config {
	t.Helper()

	cfg := &DHCPv6Config{
		Interface:   testServerIf,
		ServerAddr:  testServerIP6,
		ScriptURL:   testScriptURL6,
		HTTPBootURL: testHTTPBootURL6,
		TFTPBootURL: testTFTPBootURL6,
		ServerDUID:  testServerDUID6,
	}

	if arm64 {
		cfg.ARM64BootFile = "ipxe-arm64.efi"
	}

	if full {
		cfg.Pool = &DHCPv6Pool{Prefix: testPrefix6, DNS: []netip.Addr{testDNS6}}
	}

	require.NoError(t, cfg.Validate())

	return cfg
}

// Client kinds, as their firmware sends them.
const (
	kindPlain   = "plain"   // an OS's DHCPv6 client
	kindPXE     = "pxe"     // UEFI PXEv6 (EDK2): vendor class PXEClient, arch 7
	kindPXEArch = "pxearch" // option 61 only
	kindHTTP    = "http"    // UEFI HTTPv6 boot: vendor class HTTPClient, arch 16
	kindIPXE    = "ipxe"    // iPXE: user class iPXE, vendor class PXEClient, arch 7
	kindARM64   = "arm64"   // arm64 UEFI PXEv6
	kindARM64H  = "arm64http"
	kindBIOS    = "bios" // arch 0 without iPXE
)

func bootMods6(kind string) []dhcpv6.Modifier {
	vc := func(s string) dhcpv6.Modifier {
		return dhcpv6.WithOption(&dhcpv6.OptVendorClass{EnterpriseNumber: enterprisePXE, Data: [][]byte{[]byte(s)}})
	}

	switch kind {
	case kindPXE:
		return []dhcpv6.Modifier{vc("PXEClient:Arch:00007:UNDI:003016"), dhcpv6.WithArchType(iana.EFI_BC)}
	case kindPXEArch:
		return []dhcpv6.Modifier{dhcpv6.WithArchType(iana.EFI_X86_64)}
	case kindHTTP:
		return []dhcpv6.Modifier{vc("HTTPClient:Arch:00016:UNDI:003001"), dhcpv6.WithArchType(iana.EFI_X86_64_HTTP)}
	case kindIPXE:
		return []dhcpv6.Modifier{vc("PXEClient:Arch:00007:UNDI:003010"), dhcpv6.WithArchType(iana.EFI_BC), dhcpv6.WithUserClass([]byte("iPXE"))}
	case kindARM64:
		return []dhcpv6.Modifier{vc("PXEClient:Arch:00011:UNDI:003016"), dhcpv6.WithArchType(iana.EFI_ARM64)}
	case kindARM64H:
		return []dhcpv6.Modifier{vc("HTTPClient:Arch:00019:UNDI:003001"), dhcpv6.WithArchType(iana.EFI_ARM64_HTTP)}
	case kindBIOS:
		return []dhcpv6.Modifier{vc("PXEClient:Arch:00000:UNDI:002001"), dhcpv6.WithArchType(iana.INTEL_X86PC)}
	default:
		return nil
	}
}

// request6 builds a client message of a kind: client ID, one IA_NA (with an address
// hint when given), ours as the server ID when the type calls for it.
func request6(t testing.TB, mt dhcpv6.MessageType, kind string, mods ...dhcpv6.Modifier) *dhcpv6.Message {
	t.Helper()

	m := &dhcpv6.Message{MessageType: mt, TransactionID: testXID6}
	m.AddOption(dhcpv6.OptClientID(testClientDUID6))
	m.AddOption(dhcpv6.OptElapsedTime(0))
	m.AddOption(dhcpv6.OptRequestedOption(dhcpv6.OptionBootfileURL, dhcpv6.OptionDNSRecursiveNameServer))

	if mt != dhcpv6.MessageTypeInformationRequest {
		m.AddOption(&dhcpv6.OptIANA{IaId: testIAID6})
	}

	switch mt {
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
		m.AddOption(dhcpv6.OptServerID(testServerDUID6))
	default:
	}

	for _, mod := range append(bootMods6(kind), mods...) {
		mod(m)
	}

	// Round trip through the encoder: answer6 sees what the wire gives.
	parsed, err := dhcpv6.MessageFromBytes(m.ToBytes())
	require.NoError(t, err)

	return parsed
}

// withIAAddr replaces the request's IA_NA by one holding addr.
func withIAAddr(addr string) dhcpv6.Modifier {
	return func(d dhcpv6.DHCPv6) {
		m := d.(*dhcpv6.Message)
		m.Options.Del(dhcpv6.OptionIANA)

		ia := &dhcpv6.OptIANA{IaId: testIAID6}
		ia.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP(addr), PreferredLifetime: time.Hour, ValidLifetime: time.Hour})
		m.AddOption(ia)
	}
}

func withoutOption6(code dhcpv6.OptionCode) dhcpv6.Modifier {
	return func(d dhcpv6.DHCPv6) {
		d.(*dhcpv6.Message).Options.Del(code)
	}
}

func withServerID6(duid dhcpv6.DUID) dhcpv6.Modifier {
	return func(d dhcpv6.DHCPv6) { d.UpdateOption(dhcpv6.OptServerID(duid)) }
}

var (
	withRapidCommit6 = dhcpv6.WithRapidCommit
	otherServerDUID6 = &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}}
)

// iaStatus6 is what an IA_NA of a reply must hold.
type iaStatus6 int

const (
	iaNone        iaStatus6 = iota // no IA_NA at all
	iaAddress                      // one address in the prefix
	iaNoAddrsAval                  // status NoAddrsAvail, no address
)

func TestAnswer6(t *testing.T) {
	t.Parallel()

	const (
		solicit = dhcpv6.MessageTypeSolicit
		request = dhcpv6.MessageTypeRequest
		renew   = dhcpv6.MessageTypeRenew
		rebind  = dhcpv6.MessageTypeRebind
		release = dhcpv6.MessageTypeRelease
		decline = dhcpv6.MessageTypeDecline
		confirm = dhcpv6.MessageTypeConfirm
		inforeq = dhcpv6.MessageTypeInformationRequest
		adv     = dhcpv6.MessageTypeAdvertise
		reply   = dhcpv6.MessageTypeReply
	)

	uefiTFTP := testTFTPBootURL6 + DefaultUEFIBootFile
	uefiHTTP := testHTTPBootURL6 + DefaultUEFIBootFile

	for _, tc := range []struct {
		name  string
		full  bool
		arm64 bool
		mt    dhcpv6.MessageType
		kind  string
		mods  []dhcpv6.Modifier

		wantErr    error // matched with errors.Is; nil: answered
		wantType   dhcpv6.MessageType
		wantURL    string // "" = no option 59
		wantVC     string // "" = no vendor class
		wantIA     iaStatus6
		wantStatus *iana.StatusCode // top-level status code
		wantDNS    bool
		wantRapid  bool
	}{
		// Information mode: boot clients only, never an address.
		{name: "info: PXE solicit", mt: solicit, kind: kindPXE, wantType: adv, wantURL: uefiTFTP, wantVC: "PXEClient"},
		{name: "info: PXE arch-only solicit", mt: solicit, kind: kindPXEArch, wantType: adv, wantURL: uefiTFTP, wantVC: "PXEClient"},
		{name: "info: PXE request", mt: request, kind: kindPXE, wantType: reply, wantURL: uefiTFTP, wantVC: "PXEClient", wantIA: iaNoAddrsAval},
		{name: "info: EDK2 boot server request (port 4011)", mt: request, kind: kindPXE, mods: []dhcpv6.Modifier{withoutOption6(dhcpv6.OptionIANA)}, wantType: reply, wantURL: uefiTFTP, wantVC: "PXEClient"},
		{name: "info: PXE information-request", mt: inforeq, kind: kindPXE, wantType: reply, wantURL: uefiTFTP, wantVC: "PXEClient"},
		{name: "info: HTTP solicit", mt: solicit, kind: kindHTTP, wantType: adv, wantURL: uefiHTTP, wantVC: "HTTPClient"},
		{name: "info: HTTP request", mt: request, kind: kindHTTP, wantType: reply, wantURL: uefiHTTP, wantVC: "HTTPClient", wantIA: iaNoAddrsAval},
		{name: "info: HTTP information-request", mt: inforeq, kind: kindHTTP, wantType: reply, wantURL: uefiHTTP, wantVC: "HTTPClient"},
		{name: "info: iPXE solicit", mt: solicit, kind: kindIPXE, wantType: adv, wantURL: testScriptURL6, wantVC: "PXEClient"},
		{name: "info: iPXE information-request", mt: inforeq, kind: kindIPXE, wantType: reply, wantURL: testScriptURL6, wantVC: "PXEClient"},
		{name: "info: iPXE on BIOS", mt: inforeq, kind: kindBIOS, mods: []dhcpv6.Modifier{dhcpv6.WithUserClass([]byte("iPXE"))}, wantType: reply, wantURL: testScriptURL6, wantVC: "PXEClient"},
		{name: "info: iPXE without IA_NA", mt: solicit, kind: kindIPXE, mods: []dhcpv6.Modifier{withoutOption6(dhcpv6.OptionIANA)}, wantType: adv, wantURL: testScriptURL6, wantVC: "PXEClient"},
		{name: "info: rapid commit still advertises", mt: solicit, kind: kindPXE, mods: []dhcpv6.Modifier{withRapidCommit6}, wantType: adv, wantURL: uefiTFTP, wantVC: "PXEClient"},
		{name: "info: arm64 PXE", arm64: true, mt: solicit, kind: kindARM64, wantType: adv, wantURL: testTFTPBootURL6 + "ipxe-arm64.efi", wantVC: "PXEClient"},
		{name: "info: arm64 HTTP", arm64: true, mt: solicit, kind: kindARM64H, wantType: adv, wantURL: testHTTPBootURL6 + "ipxe-arm64.efi", wantVC: "HTTPClient"},
		{name: "info: arm64 PXE not configured", mt: solicit, kind: kindARM64, wantErr: errNoARM64},
		{name: "info: arm64 HTTP not configured", mt: solicit, kind: kindARM64H, wantErr: errNoARM64},
		{name: "info: BIOS", mt: solicit, kind: kindBIOS, wantErr: errBIOS6},
		{name: "info: plain solicit", mt: solicit, kind: kindPlain, wantErr: errNotPXE},
		{name: "info: plain information-request", mt: inforeq, kind: kindPlain, wantErr: errNotPXE},
		{name: "info: PXE renew", mt: renew, kind: kindPXE, wantErr: errMessageType},
		{name: "info: PXE rebind", mt: rebind, kind: kindPXE, wantErr: errMessageType},
		{name: "info: PXE release", mt: release, kind: kindPXE, wantErr: errMessageType},
		{name: "info: PXE decline", mt: decline, kind: kindPXE, wantErr: errMessageType},
		{name: "info: PXE confirm", mt: confirm, kind: kindPXE, wantErr: errMessageType},
		{name: "info: request to another server", mt: request, kind: kindPXE, mods: []dhcpv6.Modifier{withServerID6(otherServerDUID6)}, wantErr: errNotForUs},
		{name: "info: request without server ID", mt: request, kind: kindPXE, mods: []dhcpv6.Modifier{withoutOption6(dhcpv6.OptionServerID)}, wantErr: errNotForUs},
		{name: "info: solicit with server ID", mt: solicit, kind: kindPXE, mods: []dhcpv6.Modifier{withServerID6(testServerDUID6)}, wantErr: errServerIDInMsg6},
		{name: "info: information-request to us", mt: inforeq, kind: kindIPXE, mods: []dhcpv6.Modifier{withServerID6(testServerDUID6)}, wantType: reply, wantURL: testScriptURL6, wantVC: "PXEClient"},
		{name: "info: information-request to another", mt: inforeq, kind: kindIPXE, mods: []dhcpv6.Modifier{withServerID6(otherServerDUID6)}, wantErr: errNotForUs},
		{name: "info: information-request without client ID", mt: inforeq, kind: kindIPXE, mods: []dhcpv6.Modifier{withoutOption6(dhcpv6.OptionClientID)}, wantType: reply, wantURL: testScriptURL6, wantVC: "PXEClient"},
		{name: "info: solicit without client ID", mt: solicit, kind: kindPXE, mods: []dhcpv6.Modifier{withoutOption6(dhcpv6.OptionClientID)}, wantErr: ErrMalformed},
		{name: "info: advertise is not for a server", mt: adv, kind: kindPXE, wantErr: errMessageType},
		{name: "info: PXE vendor class without arch", mt: solicit, kind: kindPlain, mods: []dhcpv6.Modifier{
			dhcpv6.WithOption(&dhcpv6.OptVendorClass{EnterpriseNumber: enterprisePXE, Data: [][]byte{[]byte("PXEClient")}}),
		}, wantErr: errNoArch},
		{name: "info: vendor class of another enterprise", mt: solicit, kind: kindPlain, mods: []dhcpv6.Modifier{
			dhcpv6.WithOption(&dhcpv6.OptVendorClass{EnterpriseNumber: 311, Data: [][]byte{[]byte("PXEClient:Arch:00007")}}),
		}, wantErr: errNotPXE},
		{name: "info: unknown arch", mt: solicit, kind: kindPlain, mods: []dhcpv6.Modifier{dhcpv6.WithArchType(iana.Arch(0x1234))}, wantErr: errUnknownArch},
		{name: "info: HTTP arch from a PXE client", mt: solicit, kind: kindPlain, mods: []dhcpv6.Modifier{dhcpv6.WithArchType(iana.EFI_X86_64_HTTP)}, wantErr: errUnknownArch},

		// Full mode: addresses for everyone, boot URLs for boot clients.
		{name: "full: PXE solicit", full: true, mt: solicit, kind: kindPXE, wantType: adv, wantURL: uefiTFTP, wantIA: iaAddress, wantDNS: true},
		{name: "full: HTTP solicit", full: true, mt: solicit, kind: kindHTTP, wantType: adv, wantURL: uefiHTTP, wantVC: "HTTPClient", wantIA: iaAddress, wantDNS: true},
		{name: "full: iPXE request", full: true, mt: request, kind: kindIPXE, wantType: reply, wantURL: testScriptURL6, wantIA: iaAddress, wantDNS: true},
		{name: "full: plain solicit", full: true, mt: solicit, kind: kindPlain, wantType: adv, wantIA: iaAddress, wantDNS: true},
		{name: "full: plain rapid commit", full: true, mt: solicit, kind: kindPlain, mods: []dhcpv6.Modifier{withRapidCommit6}, wantType: reply, wantIA: iaAddress, wantDNS: true, wantRapid: true},
		{name: "full: plain request", full: true, mt: request, kind: kindPlain, wantType: reply, wantIA: iaAddress, wantDNS: true},
		{name: "full: plain renew", full: true, mt: renew, kind: kindPlain, wantType: reply, wantIA: iaAddress, wantDNS: true},
		{name: "full: plain rebind", full: true, mt: rebind, kind: kindPlain, wantType: reply, wantIA: iaAddress, wantDNS: true},
		{name: "full: PXE renew keeps the boot URL", full: true, mt: renew, kind: kindPXE, wantType: reply, wantURL: uefiTFTP, wantIA: iaAddress, wantDNS: true},
		{name: "full: plain information-request", full: true, mt: inforeq, kind: kindPlain, wantType: reply, wantDNS: true},
		{name: "full: HTTP information-request", full: true, mt: inforeq, kind: kindHTTP, wantType: reply, wantURL: uefiHTTP, wantVC: "HTTPClient", wantDNS: true},
		{name: "full: release", full: true, mt: release, kind: kindPlain, wantType: reply, wantStatus: new(iana.StatusSuccess)},
		{name: "full: decline", full: true, mt: decline, kind: kindPXE, wantType: reply, wantStatus: new(iana.StatusSuccess)},
		{name: "full: release to another server", full: true, mt: release, kind: kindPlain, mods: []dhcpv6.Modifier{withServerID6(otherServerDUID6)}, wantErr: errNotForUs},
		{name: "full: renew to another server", full: true, mt: renew, kind: kindPlain, mods: []dhcpv6.Modifier{withServerID6(otherServerDUID6)}, wantErr: errNotForUs},
		{name: "full: rebind with server ID", full: true, mt: rebind, kind: kindPlain, mods: []dhcpv6.Modifier{withServerID6(testServerDUID6)}, wantErr: errServerIDInMsg6},
		{name: "full: confirm on link", full: true, mt: confirm, kind: kindPlain, mods: []dhcpv6.Modifier{withIAAddr("fd00:199::1234")}, wantType: reply, wantStatus: new(iana.StatusSuccess)},
		{name: "full: confirm off link", full: true, mt: confirm, kind: kindPlain, mods: []dhcpv6.Modifier{withIAAddr("fd00:200::1234")}, wantType: reply, wantStatus: new(iana.StatusNotOnLink)},
		{name: "full: confirm without addresses", full: true, mt: confirm, kind: kindPlain, wantErr: errNoIANA6},
		{name: "full: plain solicit without IA_NA", full: true, mt: solicit, kind: kindPlain, mods: []dhcpv6.Modifier{withoutOption6(dhcpv6.OptionIANA)}, wantErr: errNoIANA6},
		{name: "full: PXE solicit without IA_NA", full: true, mt: solicit, kind: kindPXE, mods: []dhcpv6.Modifier{withoutOption6(dhcpv6.OptionIANA)}, wantType: adv, wantURL: uefiTFTP, wantDNS: true},
		{name: "full: unservable arm64 still gets an address", full: true, mt: solicit, kind: kindARM64, wantType: adv, wantIA: iaAddress, wantDNS: true},
		{name: "full: BIOS gets an address", full: true, mt: request, kind: kindBIOS, wantType: reply, wantIA: iaAddress, wantDNS: true},
		{name: "full: solicit without client ID", full: true, mt: solicit, kind: kindPlain, mods: []dhcpv6.Modifier{withoutOption6(dhcpv6.OptionClientID)}, wantErr: ErrMalformed},
		{name: "full: reply is not for a server", full: true, mt: reply, kind: kindPlain, wantErr: errMessageType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			cfg := testConfig6(t, tc.full, tc.arm64)
			req := request6(t, tc.mt, tc.kind, tc.mods...)

			resp, err := answer6(cfg, req)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				assert.Nil(t, resp)

				return
			}

			require.NoError(t, err)
			require.NotNil(t, resp)

			// What every reply carries.
			assert.Equal(t, tc.wantType, resp.MessageType)
			assert.Equal(t, req.TransactionID, resp.TransactionID)
			assert.True(t, testServerDUID6.Equal(resp.Options.ServerID()), "server ID %v", resp.Options.ServerID())

			if cid := req.Options.ClientID(); cid != nil {
				assert.Equal(t, cid.ToBytes(), resp.Options.ClientID().ToBytes())
			} else {
				assert.Nil(t, resp.GetOneOption(dhcpv6.OptionClientID))
			}

			// The reply survives the wire.
			parsed, err := dhcpv6.MessageFromBytes(resp.ToBytes())
			require.NoError(t, err)

			assert.Equal(t, tc.wantURL, parsed.Options.BootFileURL())

			if tc.wantVC != "" {
				assert.Equal(t, [][]byte{[]byte(tc.wantVC)}, parsed.Options.VendorClass(enterprisePXE))
			} else {
				assert.Empty(t, parsed.Options.VendorClasses())
			}

			checkIA6(t, cfg, parsed, tc.wantIA)

			if tc.wantStatus != nil {
				require.NotNil(t, parsed.Options.Status())
				assert.Equal(t, *tc.wantStatus, parsed.Options.Status().StatusCode)
			} else {
				assert.Nil(t, parsed.Options.Status())
			}

			if tc.wantDNS {
				require.Len(t, parsed.Options.DNS(), 1)
				assert.Equal(t, testDNS6.String(), parsed.Options.DNS()[0].String())
			} else {
				assert.Empty(t, parsed.Options.DNS())
			}

			assert.Equal(t, tc.wantRapid, parsed.GetOneOption(dhcpv6.OptionRapidCommit) != nil)
		})
	}
}

func checkIA6(t *testing.T, cfg *DHCPv6Config, resp *dhcpv6.Message, want iaStatus6) {
	t.Helper()

	ias := resp.Options.IANA()

	if want == iaNone {
		assert.Empty(t, ias)

		return
	}

	require.Len(t, ias, 1)
	ia := ias[0]
	assert.Equal(t, testIAID6, ia.IaId)

	switch want {
	case iaNoAddrsAval:
		require.NotNil(t, ia.Options.Status())
		assert.Equal(t, iana.StatusNoAddrsAvail, ia.Options.Status().StatusCode)
		assert.Empty(t, ia.Options.Addresses())
	case iaAddress:
		assert.Nil(t, ia.Options.Status())
		require.Len(t, ia.Options.Addresses(), 1)

		a := ia.Options.Addresses()[0]
		addr, ok := netip.AddrFromSlice(a.IPv6Addr)
		require.True(t, ok)
		assert.True(t, cfg.Pool.Prefix.Contains(addr), "%s outside %s", addr, cfg.Pool.Prefix)
		assert.Equal(t, address6(cfg, testClientDUID6.ToBytes(), testIAID6), addr)
		assert.Equal(t, time.Hour, a.PreferredLifetime)
		assert.Equal(t, 2*time.Hour, a.ValidLifetime)
		assert.Equal(t, 30*time.Minute, ia.T1)
		assert.Equal(t, 48*time.Minute, ia.T2)
	default:
	}
}

func TestAddress6(t *testing.T) {
	t.Parallel()

	cfg := testConfig6(t, true, false)
	duid := testClientDUID6.ToBytes()

	a := address6(cfg, duid, testIAID6)
	assert.True(t, testPrefix6.Contains(a))

	// Stable: the same client and IA get the same address, from a fresh config too.
	assert.Equal(t, a, address6(testConfig6(t, true, false), duid, testIAID6))

	// Another IA or another client gets another address.
	assert.NotEqual(t, a, address6(cfg, duid, [4]byte{0, 0, 0, 8}))
	assert.NotEqual(t, a, address6(cfg, (&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{2, 0, 0, 0, 0, 2}}).ToBytes(), testIAID6))

	// The server's own address is never handed out: make it the first choice.
	cfg.ServerAddr = a
	b := address6(cfg, duid, testIAID6)
	assert.NotEqual(t, a, b)
	assert.True(t, testPrefix6.Contains(b))

	// Many clients: never ::0, ::1 or a reserved anycast ID.
	for i := range 2000 {
		addr := address6(cfg, []byte{0, 3, 0, 1, 2, 0, 0, 0, byte(i >> 8), byte(i)}, testIAID6)
		id := addr.As16()

		require.True(t, testPrefix6.Contains(addr))
		require.NotEqual(t, [8]byte{}, [8]byte(id[8:]))
		require.NotEqual(t, [8]byte{7: 1}, [8]byte(id[8:]))
		require.False(t, id[8] == 0xfd && id[9] == 0xff && id[10] == 0xff && id[11] == 0xff && id[12] == 0xff && id[13] == 0xff && id[14] == 0xff && id[15] >= 0x80)
	}
}

func TestAnswer6ReplyDropsOtherAddresses(t *testing.T) {
	t.Parallel()

	cfg := testConfig6(t, true, false)
	stale := "fd00:199::dead"

	resp, err := answer6(cfg, request6(t, dhcpv6.MessageTypeRenew, kindPlain, withIAAddr(stale)))
	require.NoError(t, err)

	ias := resp.Options.IANA()
	require.Len(t, ias, 1)

	addrs := ias[0].Options.Addresses()
	require.Len(t, addrs, 2)
	assert.Equal(t, address6(cfg, testClientDUID6.ToBytes(), testIAID6).String(), addrs[0].IPv6Addr.String())
	assert.Equal(t, time.Hour, addrs[0].PreferredLifetime)
	assert.Equal(t, stale, addrs[1].IPv6Addr.String())
	assert.Zero(t, addrs[1].PreferredLifetime)
	assert.Zero(t, addrs[1].ValidLifetime)

	// An ADVERTISE only offers.
	resp, err = answer6(cfg, request6(t, dhcpv6.MessageTypeSolicit, kindPlain, withIAAddr(stale)))
	require.NoError(t, err)
	require.Len(t, resp.Options.IANA(), 1)
	assert.Len(t, resp.Options.IANA()[0].Options.Addresses(), 1)
}

func TestAnswerRelay6(t *testing.T) {
	t.Parallel()

	relayed := func(t *testing.T, linkAddr string, inner dhcpv6.DHCPv6) *dhcpv6.RelayMessage {
		t.Helper()

		r := &dhcpv6.RelayMessage{
			MessageType: dhcpv6.MessageTypeRelayForward, HopCount: 0,
			LinkAddr: net.ParseIP(linkAddr), PeerAddr: net.ParseIP("fe80::5054:ff:fe12:3456"),
		}
		r.AddOption(dhcpv6.OptInterfaceID([]byte("eth7")))
		r.AddOption(dhcpv6.OptRelayMessage(inner))

		parsed, err := dhcpv6.RelayMessageFromBytes(r.ToBytes())
		require.NoError(t, err)

		return parsed
	}

	for _, tc := range []struct {
		name     string
		full     bool
		link     string
		nested   bool
		inner    dhcpv6.MessageType
		kind     string
		wantErr  error
		wantType dhcpv6.MessageType
	}{
		{name: "info: HTTP solicit", link: "2001:db8:7::1", inner: dhcpv6.MessageTypeSolicit, kind: kindHTTP, wantType: dhcpv6.MessageTypeAdvertise},
		{name: "info: iPXE information-request", link: "2001:db8:7::1", inner: dhcpv6.MessageTypeInformationRequest, kind: kindIPXE, wantType: dhcpv6.MessageTypeReply},
		{name: "info: plain solicit", link: "2001:db8:7::1", inner: dhcpv6.MessageTypeSolicit, kind: kindPlain, wantErr: errNotPXE},
		{name: "full: relay on the pool's link", full: true, link: "fd00:199::fe", inner: dhcpv6.MessageTypeRequest, kind: kindPlain, wantType: dhcpv6.MessageTypeReply},
		{name: "full: relay on another link", full: true, link: "2001:db8:7::1", inner: dhcpv6.MessageTypeSolicit, kind: kindPXE, wantErr: errRelayLink6},
		{name: "nested relays", link: "2001:db8:7::1", nested: true, inner: dhcpv6.MessageTypeSolicit, kind: kindPXE, wantErr: errRelayNested6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			cfg := testConfig6(t, tc.full, false)
			req := request6(t, tc.inner, tc.kind)

			var inner dhcpv6.DHCPv6 = req
			if tc.nested {
				inner = relayed(t, tc.link, req)
			}

			out, _, err := answerRelay6(cfg, relayed(t, tc.link, inner))
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)

			parsed, err := dhcpv6.RelayMessageFromBytes(out.ToBytes())
			require.NoError(t, err)
			assert.Equal(t, dhcpv6.MessageTypeRelayReply, parsed.MessageType)
			assert.Equal(t, []byte("eth7"), parsed.Options.InterfaceID())
			assert.Equal(t, tc.link, parsed.LinkAddr.String())
			assert.Equal(t, "fe80::5054:ff:fe12:3456", parsed.PeerAddr.String())

			msg, err := parsed.GetInnerMessage()
			require.NoError(t, err)
			assert.Equal(t, tc.wantType, msg.MessageType)
			assert.Equal(t, req.TransactionID, msg.TransactionID)
		})
	}

	t.Run("relay-repl is not for a server", func(t *testing.T) {
		t.Parallel()

		r := relayed(t, "2001:db8:7::1", request6(t, dhcpv6.MessageTypeSolicit, kindPXE))
		r.MessageType = dhcpv6.MessageTypeRelayReply

		_, _, err := answerRelay6(testConfig6(t, false, false), r)
		require.ErrorIs(t, err, errMessageType)
	})
}

func TestDHCPv6ConfigValidate(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		mod     func(c *DHCPv6Config)
		wantErr string
	}{
		{"valid information mode", func(*DHCPv6Config) {}, ""},
		{"valid full mode", func(c *DHCPv6Config) { c.Pool = &DHCPv6Pool{Prefix: testPrefix6} }, ""},
		{"no script URL", func(c *DHCPv6Config) { c.ScriptURL = "" }, "no iPXE script URL"},
		{"HTTP boot URL not http", func(c *DHCPv6Config) { c.HTTPBootURL = "tftp://[fd00::1]/" }, "not an http(s) URL"},
		{"TFTP boot URL not tftp", func(c *DHCPv6Config) { c.TFTPBootURL = "http://[fd00::1]/" }, "not a tftp URL"},
		{"IPv4 server address", func(c *DHCPv6Config) { c.ServerAddr = testServerIP }, "not an IPv6 address"},
		{"no server DUID", func(c *DHCPv6Config) { c.ServerDUID = nil }, "no server DUID"},
		{"port out of range", func(c *DHCPv6Config) { c.Port = 70000 }, "out of range"},
		{"prefix not a /64", func(c *DHCPv6Config) { c.Pool = &DHCPv6Pool{Prefix: netip.MustParsePrefix("fd00:199::/48")} }, "not an IPv6 /64"},
		{"IPv4 prefix", func(c *DHCPv6Config) { c.Pool = &DHCPv6Pool{Prefix: netip.MustParsePrefix("10.0.0.0/24")} }, "not an IPv6 /64"},
		{"valid shorter than preferred", func(c *DHCPv6Config) {
			c.Pool = &DHCPv6Pool{Prefix: testPrefix6, PreferredLifetime: time.Hour, ValidLifetime: time.Minute}
		}, "shorter than the preferred"},
		{"IPv4 DNS", func(c *DHCPv6Config) {
			c.Pool = &DHCPv6Pool{Prefix: testPrefix6, DNS: []netip.Addr{testServerIP}}
		}, "DNS server 10.199.0.1 is not an IPv6 address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			cfg := &DHCPv6Config{ScriptURL: testScriptURL6, ServerAddr: testServerIP6, ServerDUID: testServerDUID6}
			tc.mod(cfg)

			err := cfg.Validate()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, DefaultUEFIBootFile, cfg.UEFIBootFile)

			if cfg.Pool != nil {
				assert.Equal(t, time.Hour, cfg.Pool.PreferredLifetime)
				assert.Equal(t, 2*time.Hour, cfg.Pool.ValidLifetime)
			}
		})
	}
}

// testDHCPv6 is a DHCPv6 server on a validated configuration, without sockets.
func testDHCPv6(cfg *DHCPv6Config, logger *zap.Logger) *DHCPv6 {
	m := NewMetrics(nil)

	return &DHCPv6{
		cfg: *cfg, iface: &net.Interface{Name: testServerIf}, logger: logger, unserved: newUnservedLog(logger),
		dhcp: newDHCPv6Counters(m, "dhcpv6"), boot: newDHCPv6Counters(m, "dhcpv6_bootserver"),
	}
}

func TestDHCPv6Handle(t *testing.T) {
	t.Parallel()

	src := netip.MustParseAddrPort("[fe80::5054:ff:fe12:3456%vs0]:546")

	t.Run("answers to the client port", func(t *testing.T) {
		t.Parallel()

		s := testDHCPv6(testConfig6(t, false, false), zap.NewNop())
		s.iface.Index = 7

		// Scoped by the server's interface index, whatever zone name came with src.
		out, dst := s.handle(request6(t, dhcpv6.MessageTypeSolicit, kindHTTP).ToBytes(), src, false)
		require.NotNil(t, out)
		assert.Equal(t, "[fe80::5054:ff:fe12:3456%7]:546", dst.String())

		resp, err := dhcpv6.MessageFromBytes(out)
		require.NoError(t, err)
		assert.Equal(t, testHTTPBootURL6+DefaultUEFIBootFile, resp.Options.BootFileURL())
	})

	t.Run("answers the boot server port to the port asking", func(t *testing.T) {
		t.Parallel()

		s := testDHCPv6(testConfig6(t, false, false), zap.NewNop())
		bootSrc := netip.MustParseAddrPort("[fd00:199::2]:4011")

		// What EDK2 sends the host of a proxy offer's boot URL: a REQUEST naming us,
		// without IA.
		req := request6(t, dhcpv6.MessageTypeRequest, kindPXE, withoutOption6(dhcpv6.OptionIANA))

		out, dst := s.handle(req.ToBytes(), bootSrc, true)
		require.NotNil(t, out)
		assert.Equal(t, bootSrc, dst)

		resp, err := dhcpv6.MessageFromBytes(out)
		require.NoError(t, err)
		assert.Equal(t, dhcpv6.MessageTypeReply, resp.MessageType)
		assert.Equal(t, testTFTPBootURL6+DefaultUEFIBootFile, resp.Options.BootFileURL())
		assert.InDelta(t, 1, testutilValue(t, s.boot.reply), 0)
		assert.InDelta(t, 0, testutilValue(t, s.dhcp.reply), 0)

		// Relays go to 547 only.
		relay, err := dhcpv6.EncapsulateRelay(req, dhcpv6.MessageTypeRelayForward, net.ParseIP("2001:db8::1"), net.ParseIP("fe80::1"))
		require.NoError(t, err)

		out, _ = s.handle(relay.ToBytes(), bootSrc, true)
		assert.Nil(t, out)
	})

	t.Run("answers relays to the server port", func(t *testing.T) {
		t.Parallel()

		s := testDHCPv6(testConfig6(t, false, false), zap.NewNop())

		relay, err := dhcpv6.EncapsulateRelay(request6(t, dhcpv6.MessageTypeSolicit, kindPXE), dhcpv6.MessageTypeRelayForward,
			net.ParseIP("2001:db8::1"), net.ParseIP("fe80::1"))
		require.NoError(t, err)

		relaySrc := netip.MustParseAddrPort("[2001:db8::1]:547")

		out, dst := s.handle(relay.ToBytes(), relaySrc, false)
		require.NotNil(t, out)
		assert.Equal(t, relaySrc, dst)
	})

	t.Run("malformed and ignored are counted, unservable logged once", func(t *testing.T) {
		t.Parallel()

		core, logs := observer.New(zap.DebugLevel)
		s := testDHCPv6(testConfig6(t, false, false), zap.New(core))

		for _, pkt := range [][]byte{{}, {1}, {1, 2, 3, 4, 0, 1, 0, 9}} {
			out, _ := s.handle(pkt, src, false)
			assert.Nil(t, out)
		}

		for range 3 {
			out, _ := s.handle(request6(t, dhcpv6.MessageTypeSolicit, kindARM64).ToBytes(), src, false)
			assert.Nil(t, out)
		}

		out, _ := s.handle(request6(t, dhcpv6.MessageTypeSolicit, kindPlain).ToBytes(), src, false)
		assert.Nil(t, out)

		assert.InDelta(t, 3, testutilValue(t, s.dhcp.malformed), 0)
		assert.InDelta(t, 3, testutilValue(t, s.dhcp.m.ignored.WithLabelValues("dhcpv6", "arm64_not_configured")), 0)
		assert.InDelta(t, 1, testutilValue(t, s.dhcp.m.ignored.WithLabelValues("dhcpv6", "not_pxe")), 0)

		warned := logs.FilterMessage("boot client not served").All()
		require.Len(t, warned, 1)
		assert.Equal(t, testMAC.String(), warned[0].ContextMap()["mac"])
	})

	t.Run("full mode tells of a boot client it gives only an address", func(t *testing.T) {
		t.Parallel()

		core, logs := observer.New(zap.InfoLevel)
		s := testDHCPv6(testConfig6(t, true, false), zap.New(core))

		out, _ := s.handle(request6(t, dhcpv6.MessageTypeSolicit, kindARM64).ToBytes(), src, false)
		require.NotNil(t, out)
		assert.Len(t, logs.FilterMessage("boot client not served").All(), 1)
	})
}

func TestClientHWAddr6(t *testing.T) {
	t.Parallel()

	en := &dhcpv6.DUIDEN{EnterpriseNumber: 32473, EnterpriseIdentifier: []byte{1, 2}}

	for _, tc := range []struct {
		name string
		duid dhcpv6.DUID
		want net.HardwareAddr
	}{
		{"DUID-LLT", testClientDUID6, testMAC},
		{"DUID-LL", &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: testMAC}, testMAC},
		{"DUID-EN", en, net.HardwareAddr(en.ToBytes())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			m := &dhcpv6.Message{MessageType: dhcpv6.MessageTypeSolicit}
			m.AddOption(dhcpv6.OptClientID(tc.duid))
			assert.Equal(t, tc.want, clientHWAddr6(m))
		})
	}

	assert.Nil(t, clientHWAddr6(&dhcpv6.Message{}))
}

func testutilValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()

	var m dto.Metric
	require.NoError(t, c.Write(&m))

	return m.GetCounter().GetValue()
}
