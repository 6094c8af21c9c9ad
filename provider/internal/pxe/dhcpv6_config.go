package pxe

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
)

// DHCPv6Config is what the DHCPv6 boot server needs to know.
type DHCPv6Config struct {
	// Interface is the name of the interface to serve on. Required by the server;
	// answer6 does not use it.
	Interface string
	// ServerAddr is the provider's global IPv6 address on the interface. Full mode never
	// hands it out. Default: the interface's first global IPv6 address.
	ServerAddr netip.Addr
	// ScriptURL is the boot URL of iPXE clients (user class "iPXE"), e.g.
	// http://[fd77::1]:50042/ipxe/start.ipxe. Required.
	ScriptURL string
	// HTTPBootURL, when set, answers UEFI HTTP boot clients (vendor class "HTTPClient")
	// with this prefix and the architecture's boot file, e.g. http://[fd77::1]:50042/boot/.
	HTTPBootURL string
	// TFTPBootURL, when set, answers UEFI PXE clients over IPv6 with this prefix and the
	// architecture's boot file, e.g. tftp://[fd77::1]/.
	TFTPBootURL string
	// UEFIBootFile is the x86-64 EFI boot file name. Default snponly.efi.
	UEFIBootFile string
	// ARM64BootFile is the arm64 EFI boot file name. Empty: arm64 firmware is not
	// answered (and logged once per machine).
	ARM64BootFile string
	// Pool turns on full mode: addresses for every client. Nil is information mode, beside
	// a site's router and DHCPv6 server: boot URLs only, no addresses.
	Pool *DHCPv6Pool
	// Serving, when set, errs while this provider must not answer machines (a replica
	// cut off from the shared state): nothing is answered then (Config.Serving's twin).
	Serving func() error
	// Port is the port listened on; 0 means 547. Replies go to port 546 (clients) and
	// 547 (relays) whatever it is.
	Port int
	// PXEPort is the boot server port of EDK2 PXE firmware, which asks the host of a
	// proxy offer's boot URL there for the boot URL again; 0 means 4011. It is bound on
	// ServerAddr when set, so that replies come from the address the firmware asked.
	PXEPort int
	// ServerDUID is the server ID of every reply. Default: a DUID-LL of the interface's
	// MAC address.
	ServerDUID dhcpv6.DUID

	serverID []byte
}

// DHCPv6Pool is the address pool of full DHCPv6 mode.
type DHCPv6Pool struct {
	// Prefix is the link's /64. Each client's address is the prefix and an interface ID
	// hashed from its DUID and IAID: stable across restarts without any state.
	Prefix netip.Prefix
	// PreferredLifetime and ValidLifetime of the addresses. Defaults: one hour and two
	// hours. T1 and T2 are 0.5 and 0.8 of the preferred lifetime.
	PreferredLifetime, ValidLifetime time.Duration
	// DNS servers (option 23); optional.
	DNS []netip.Addr
}

func (c *DHCPv6Config) port() int {
	if c.Port == 0 {
		return dhcpv6ServerPort
	}

	return c.Port
}

func (c *DHCPv6Config) pxePort() int {
	if c.PXEPort == 0 {
		return dhcpv6BootPort
	}

	return c.PXEPort
}

// Validate fills defaults and checks the configuration; answer6 needs a validated one.
// ServerDUID must be set (NewDHCPv6 sets it from the interface first).
func (c *DHCPv6Config) Validate() error {
	if c.UEFIBootFile == "" {
		c.UEFIBootFile = DefaultUEFIBootFile
	}

	if c.ScriptURL == "" {
		return errors.New("no iPXE script URL configured")
	}

	if c.HTTPBootURL != "" && !strings.HasPrefix(c.HTTPBootURL, "http://") && !strings.HasPrefix(c.HTTPBootURL, "https://") {
		return fmt.Errorf("HTTP boot URL %q is not an http(s) URL", c.HTTPBootURL)
	}

	if c.TFTPBootURL != "" && !strings.HasPrefix(c.TFTPBootURL, "tftp://") {
		return fmt.Errorf("TFTP boot URL %q is not a tftp URL", c.TFTPBootURL)
	}

	if c.ServerAddr.IsValid() && (!c.ServerAddr.Is6() || c.ServerAddr.Is4In6()) {
		return fmt.Errorf("server address %s is not an IPv6 address", c.ServerAddr)
	}

	for _, port := range []int{c.Port, c.PXEPort} {
		if port < 0 || port > math.MaxUint16 {
			return fmt.Errorf("port %d is out of range", port)
		}
	}

	if c.ServerDUID == nil {
		return errors.New("no server DUID configured")
	}

	c.serverID = c.ServerDUID.ToBytes()

	if p := c.Pool; p != nil {
		if !p.Prefix.IsValid() || !p.Prefix.Addr().Is6() || p.Prefix.Addr().Is4In6() || p.Prefix.Bits() != 64 {
			return fmt.Errorf("DHCPv6 pool prefix %s is not an IPv6 /64", p.Prefix)
		}

		p.Prefix = p.Prefix.Masked()

		if p.PreferredLifetime <= 0 {
			p.PreferredLifetime = DefaultLeaseTime
		}

		if p.ValidLifetime <= 0 {
			p.ValidLifetime = 2 * p.PreferredLifetime
		}

		if p.ValidLifetime < p.PreferredLifetime {
			return fmt.Errorf("DHCPv6 valid lifetime %s is shorter than the preferred lifetime %s", p.ValidLifetime, p.PreferredLifetime)
		}

		for _, a := range p.DNS {
			if !a.Is6() || a.Is4In6() {
				return fmt.Errorf("DNS server %s is not an IPv6 address", a)
			}
		}
	}

	return nil
}
