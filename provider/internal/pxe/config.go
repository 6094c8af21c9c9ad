package pxe

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
)

// Defaults of Config and TFTPConfig.
const (
	DefaultBIOSBootFile = "undionly.kpxe"
	// DefaultUEFIBootFile is snponly.efi, not ipxe.efi: Debian's 2019 ipxe.efi, once
	// it exits (the boot-from-disk methods), leaves OVMF's IPv6 stack polling the SNP
	// interface it installed and freed, in a loop that never ends; the machine never
	// reaches its disk. snponly.efi drives only the NIC the firmware booted from,
	// through the firmware's own driver, and hands it back intact.
	DefaultUEFIBootFile = "snponly.efi"
	DefaultTFTPRoot     = "/usr/lib/ipxe"
	DefaultTFTPListen   = ":69"
	DefaultLeaseTime    = time.Hour
)

// Config is what the DHCP servers (proxy and full) need to know.
type Config struct {
	// Interface is the interface to serve on: a name ("br0") or an IPv4 address on it.
	// Required by the servers; Answer does not use it.
	Interface string
	// ServerIP is the provider's IPv4 address on that interface: siaddr, option 54
	// (server identifier), option 66 and the BOOTP sname. Defaults to the IP given as
	// Interface, or the interface's first IPv4 address.
	ServerIP netip.Addr
	// ScriptURL is the boot file handed to iPXE clients (option 77 contains "iPXE"),
	// e.g. http://10.77.0.1:50042/ipxe/start.ipxe. Required.
	ScriptURL string
	// BIOSBootFile is the TFTP file for BIOS x86 PXE firmware (option 93 type 0).
	// Default undionly.kpxe.
	BIOSBootFile string
	// UEFIBootFile is the TFTP file for x86 UEFI PXE firmware (types 6, 7, 9).
	// Default snponly.efi (ipxe.efi, with iPXE's own NIC drivers, also boots, but a
	// machine it sends back to the firmware over IPv6 hangs).
	UEFIBootFile string
	// ARM64BootFile is the TFTP file for arm64 UEFI PXE firmware (type 11). Empty: arm64
	// PXE firmware is not answered (Debian ships no arm64 iPXE).
	ARM64BootFile string
	// ARM64UKI, when ARM64BootFile is empty, answers arm64 UEFI HTTP boot clients with
	// the URL of a Unified Kernel Image the provider builds for the machine
	// (HTTPBootURL + UKIPath): arm64 HTTP boot starts it with no loader in between.
	ARM64UKI bool
	// HTTPBootURL, when set, answers UEFI HTTP boot clients (vendor class "HTTPClient"):
	// they get this URL with the architecture's EFI boot file name appended
	// (UEFIBootFile, ARM64BootFile), e.g. http://10.77.0.1:50042/boot/ + ipxe.efi.
	// Empty: HTTP boot clients are not answered (and logged once each).
	HTTPBootURL string
	// DHCPPort and PXEPort are the ports listened on; 0 means 67 and 4011. Tests and
	// benchmarks move them.
	DHCPPort int
	PXEPort  int
	// Pool turns on full DHCP mode (NewDHCPServer). Nil for the proxy.
	Pool *Pool
	// Trace, when set, marks the offers made to PXE clients on their boot timelines.
	Trace *boottrace.Recorder
	// Serving, when set, errs while this provider must not answer machines (a replica
	// cut off from the shared state): nothing is answered then, and a replica that is
	// answers instead.
	Serving func() error

	serverIP   net.IP
	serverName string
}

// Pool is the address pool of full DHCP mode.
type Pool struct {
	// Start and End bound the range handed out, both included.
	Start, End netip.Addr
	// Subnet is the network of the interface, e.g. 10.77.0.0/24 (option 1).
	Subnet netip.Prefix
	// Router (option 3) and DNS (option 6) are optional.
	Router netip.Addr
	DNS    []netip.Addr
	// LeaseTime is option 51. Default one hour.
	LeaseTime time.Duration
}

func (c *Config) dhcpPort() int {
	if c.DHCPPort == 0 {
		return 67
	}

	return c.DHCPPort
}

func (c *Config) pxePort() int {
	if c.PXEPort == 0 {
		return 4011
	}

	return c.PXEPort
}

// Validate fills defaults and checks the configuration; Answer needs a validated Config.
// ServerIP must be set (the servers set it from Interface before validating).
func (c *Config) Validate() error {
	if c.BIOSBootFile == "" {
		c.BIOSBootFile = DefaultBIOSBootFile
	}

	if c.UEFIBootFile == "" {
		c.UEFIBootFile = DefaultUEFIBootFile
	}

	if c.ScriptURL == "" {
		return errors.New("no iPXE script URL configured")
	}

	if c.HTTPBootURL != "" && !strings.HasPrefix(c.HTTPBootURL, "http://") && !strings.HasPrefix(c.HTTPBootURL, "https://") {
		return fmt.Errorf("HTTP boot URL %q is not an http(s) URL", c.HTTPBootURL)
	}

	if !c.ServerIP.Is4() {
		return fmt.Errorf("server IP %q is not an IPv4 address", c.ServerIP)
	}

	for _, port := range []int{c.DHCPPort, c.PXEPort} {
		if port < 0 || port > math.MaxUint16 {
			return fmt.Errorf("port %d is out of range", port)
		}
	}

	// Precomputed once: every reply carries them.
	c.serverIP = net.IP(c.ServerIP.AsSlice())
	c.serverName = c.ServerIP.String()

	if c.Pool != nil {
		p := c.Pool
		if !p.Start.Is4() || !p.End.Is4() || p.End.Less(p.Start) {
			return fmt.Errorf("invalid pool range %s-%s", p.Start, p.End)
		}

		if !p.Subnet.IsValid() || !p.Subnet.Contains(p.Start) || !p.Subnet.Contains(p.End) {
			return fmt.Errorf("pool range %s-%s is not inside subnet %s", p.Start, p.End, p.Subnet)
		}

		if p.LeaseTime <= 0 {
			p.LeaseTime = DefaultLeaseTime
		}
	}

	return nil
}

// Global6 accepts global unicast IPv6 addresses, unique local ones (fd00::/8) included:
// the addresses machines on a provisioning network reach the provider at.
func Global6(a netip.Addr) bool { return a.Is6() && !a.Is4In6() && a.IsGlobalUnicast() }

// ResolveInterface finds the interface spec names (a name, or one of its addresses) and
// its first address that want accepts — the one given, when spec is such an address.
func ResolveInterface(spec string, want func(netip.Addr) bool) (*net.Interface, netip.Addr, error) {
	if spec == "" {
		return nil, netip.Addr{}, errors.New("no interface configured")
	}

	given, err := netip.ParseAddr(spec)
	isIP := err == nil

	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, netip.Addr{}, fmt.Errorf("error listing interfaces: %w", err)
	}

	for i := range ifaces {
		iface := &ifaces[i]
		if !isIP && iface.Name != spec {
			continue
		}

		addrs, err := interfaceAddrs(iface)
		if err != nil {
			return nil, netip.Addr{}, err
		}

		if isIP && !slices.Contains(addrs, given) {
			continue
		}

		if isIP && want(given) {
			return iface, given, nil
		}

		for _, a := range addrs {
			if want(a) {
				return iface, a, nil
			}
		}

		return iface, netip.Addr{}, nil
	}

	if isIP {
		return nil, netip.Addr{}, fmt.Errorf("no interface has address %s", spec)
	}

	return nil, netip.Addr{}, fmt.Errorf("interface %s not found", spec)
}

// interfaceAddrs lists the interface's IP addresses.
func interfaceAddrs(iface *net.Interface) ([]netip.Addr, error) {
	addrs, err := iface.Addrs()
	if err != nil {
		return nil, fmt.Errorf("error listing addresses of %s: %w", iface.Name, err)
	}

	out := make([]netip.Addr, 0, len(addrs))

	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}

	return out, nil
}
