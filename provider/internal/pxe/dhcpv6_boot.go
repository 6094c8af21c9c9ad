package pxe

import (
	"bytes"

	"github.com/insomniacslk/dhcp/dhcpv6"
)

// Boot6 is the boot decision for one DHCPv6 boot client.
type Boot6 struct {
	Arch ClientArch
	// IPXE is set for iPXE (user class "iPXE"): URL is the script URL.
	IPXE bool
	// HTTP is set for UEFI HTTP boot clients (vendor class "HTTPClient"): the answer
	// says "HTTPClient" back, which UEFI requires to take an HTTP boot offer.
	HTTP bool
	// URL is option 59 (boot file URL): the script, an http(s) or a tftp URL.
	URL string
}

// bootFor6 decides the boot URL of a DHCPv6 request. A request is a boot client when it
// carries a PXE or HTTP boot vendor class (16, enterprise 343), a client architecture
// (61, RFC 5970) or the iPXE user class (15). Errors match ErrIgnore (errNotPXE for
// clients that are not booting) or ErrMalformed.
func bootFor6(cfg *DHCPv6Config, req *dhcpv6.Message) (Boot6, error) {
	vc := vendorClass6(req)
	httpClient := bytes.HasPrefix(vc, vendorHTTPClient)
	pxeClient := bytes.HasPrefix(vc, vendorPXEClient)

	var arch []byte
	if opt := req.Options.GetOne(dhcpv6.OptionClientArchType); opt != nil {
		arch = opt.ToBytes()
		if arch == nil {
			arch = []byte{} // present and empty: malformed, not absent
		}
	}

	// iPXE (ROM or chainloaded, any firmware, IPv6 included) takes the script whatever
	// its architecture: the script asks for the rest by HTTP.
	if !httpClient && isIPXE6(req) {
		b := Boot6{IPXE: true, URL: cfg.ScriptURL}
		b.Arch, _ = requestArch(arch, vc) // for the log only

		return b, nil
	}

	if !httpClient && !pxeClient && arch == nil {
		return Boot6{}, errNotPXE
	}

	ca, err := requestArch(arch, vc)
	if err != nil {
		return Boot6{Arch: ca}, err
	}

	b := Boot6{Arch: ca}

	if httpClient {
		return httpBoot6(cfg, b)
	}

	switch {
	case ca.Firmware == FirmwareBIOS:
		// BIOS PXE firmware has no IPv6: only iPXE (above) gets here over DHCPv6.
		return b, errBIOS6
	case ca.HTTPBoot:
		return b, errUnknownArch // an HTTP boot type from a PXE client cannot take TFTP
	case cfg.TFTPBootURL == "":
		return b, errNoTFTP6
	case ca.Arch == ArchARM64:
		if cfg.ARM64BootFile == "" {
			return b, errNoARM64
		}

		b.URL = cfg.TFTPBootURL + cfg.ARM64BootFile
	default:
		b.URL = cfg.TFTPBootURL + cfg.UEFIBootFile
	}

	return b, nil
}

// httpBoot6 is the answer to a UEFI HTTP boot client: the architecture's EFI boot file
// over HTTP.
func httpBoot6(cfg *DHCPv6Config, b Boot6) (Boot6, error) {
	if cfg.HTTPBootURL == "" {
		return b, errHTTPBoot
	}

	b.HTTP = true

	switch {
	case b.Arch.Firmware != FirmwareUEFI:
		return b, errUnknownArch // a BIOS client cannot HTTP boot
	case b.Arch.Arch == ArchARM64:
		if cfg.ARM64BootFile == "" {
			return b, errNoARM64
		}

		b.URL = cfg.HTTPBootURL + cfg.ARM64BootFile
	default:
		b.URL = cfg.HTTPBootURL + cfg.UEFIBootFile
	}

	return b, nil
}

// vendorClass6 returns the first data item of the request's PXE vendor class
// (enterprise 343), or nil.
func vendorClass6(req *dhcpv6.Message) []byte {
	for _, vc := range req.Options.VendorClasses() {
		if vc.EnterpriseNumber == enterprisePXE && len(vc.Data) > 0 {
			return vc.Data[0]
		}
	}

	return nil
}

func isIPXE6(req *dhcpv6.Message) bool {
	for _, uc := range req.Options.UserClasses() {
		if bytes.Contains(uc, userClassIPXE) {
			return true
		}
	}

	return false
}

// addBootOptions6 adds the boot URL and the vendor class the firmware looks for:
// "HTTPClient" for UEFI HTTP boot, which takes no offer without it; "PXEClient" for PXE
// firmware and iPXE in a proxy answer (no address), which EDK2 then classes as a proxy
// BINL offer: it takes its address from the site's offer and asks the boot URL's host on
// port 4011 (see DHCPv6.Run). Without it, EDK2 would take an answer without an address
// for an address offer. An answer with an address leaves it out, so that EDK2 takes the
// boot URL from it directly.
func addBootOptions6(reply *dhcpv6.Message, b *Boot6, proxy bool) {
	reply.AddOption(dhcpv6.OptBootFileURL(b.URL))

	switch {
	case b.HTTP:
		reply.AddOption(&dhcpv6.OptVendorClass{EnterpriseNumber: enterprisePXE, Data: [][]byte{vendorHTTPClient}})
	case proxy:
		reply.AddOption(&dhcpv6.OptVendorClass{EnterpriseNumber: enterprisePXE, Data: [][]byte{vendorPXEClient}})
	default:
	}
}
