package service

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/cosi-project/runtime/pkg/state"

	"github.com/anvil-metal/anvil/provider/internal/pxe"
)

// DHCPv6 modes (--dhcpv6-mode).
const (
	dhcpv6Off  = "off"
	dhcpv6Info = "info"
	dhcpv6Full = "full"
)

// dhcpv6 builds the DHCPv6 boot server, or nothing when it is off. It serves the DHCP
// interface; the URLs it hands out name the advertise address when that is IPv6 (an
// IPv6-only provisioning network), else the interface's first global IPv6 address.
func (env *environment) dhcpv6(metrics *pxe.Metrics) (*runner, error) {
	opts := env.opts

	switch opts.DHCPv6Mode {
	case "", dhcpv6Off:
		return nil, nil //nolint:nilnil // no DHCPv6 service is what was asked for
	case dhcpv6Info, dhcpv6Full:
	default:
		return nil, fmt.Errorf("invalid --dhcpv6-mode %q: off, info or full", opts.DHCPv6Mode)
	}

	// Checked before the interface: a wrong flag is the first thing to hear of.
	var pool *pxe.DHCPv6Pool

	if opts.DHCPv6Mode == dhcpv6Full {
		prefix, err := netip.ParsePrefix(opts.DHCPv6Prefix)
		if err != nil || !prefix.Addr().Is6() || prefix.Bits() != 64 {
			return nil, fmt.Errorf("full DHCPv6 mode needs --dhcpv6-prefix, an IPv6 /64 (%q)", opts.DHCPv6Prefix)
		}

		pool = &pxe.DHCPv6Pool{Prefix: prefix.Masked()}
	}

	spec := opts.DHCPProxyIfaceOrIP
	if spec == "" {
		spec = env.advertise.String()
	}

	iface, addr, err := pxe.ResolveInterface(spec, pxe.Global6)
	if err != nil {
		return nil, fmt.Errorf("error finding the DHCPv6 interface: %w", err)
	}

	if !addr.IsValid() {
		return nil, fmt.Errorf("error finding the DHCPv6 interface: %s has no global IPv6 address", iface.Name)
	}

	if env.advertise.Is6() {
		addr = env.advertise
	}

	base := "http://" + net.JoinHostPort(addr.String(), strconv.Itoa(opts.APIPort))

	cfg := pxe.DHCPv6Config{
		Interface:    iface.Name,
		ServerAddr:   addr,
		ScriptURL:    base + "/ipxe/start.ipxe",
		HTTPBootURL:  base + "/boot/",
		TFTPBootURL:  "tftp://[" + addr.String() + "]/",
		UEFIBootFile: opts.IPXEUEFIFile,
		Pool:         pool,
	}

	if opts.IPXEARM64File != "" {
		cfg.ARM64BootFile = arm64TFTPName
	}

	if env.site != nil {
		// A replica cut off from etcd leaves the machines to the replicas that are not.
		cfg.Serving = env.site.health.Ready
	}

	srv, err := pxe.NewDHCPv6(cfg, env.logger.Named("dhcpv6"), metrics)
	if err != nil {
		return nil, fmt.Errorf("error configuring DHCPv6: %w", err)
	}

	if pool != nil {
		// Full mode hands addresses out of memory: on a site, the leader's alone.
		return &runner{name: "dhcpv6", lead: func(ctx context.Context, _ state.State) error { return srv.Run(ctx) }}, nil
	}

	return &runner{name: "dhcpv6", run: srv.Run}, nil
}
