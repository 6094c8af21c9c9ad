package service

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/cosi-project/runtime/pkg/state"

	"github.com/anvil-metal/anvil/provider/internal/pxe"
)

// arm64TFTPName is the name the arm64 iPXE binary is served under.
const arm64TFTPName = "ipxe-arm64.efi"

// bootServices builds what answers booting machines below HTTP: DHCP (proxy or full),
// DHCPv6 and TFTP.
func (env *environment) bootServices() ([]runner, error) {
	opts := env.opts
	metrics := pxe.NewMetrics(env.registry)

	var runners []runner

	dhcp, err := env.dhcp(metrics)
	if err != nil {
		return nil, err
	}

	if dhcp != nil {
		runners = append(runners, *dhcp)
	}

	dhcp6, err := env.dhcpv6(metrics)
	if err != nil {
		return nil, err
	}

	if dhcp6 != nil {
		runners = append(runners, *dhcp6)
	}

	if !opts.DisableTFTP {
		cfg := pxe.TFTPConfig{
			Root:      opts.TFTPRoot,
			Listen:    opts.TFTPListenAddress,
			BootFiles: []string{opts.IPXEBIOSFile, opts.IPXEUEFIFile},
			// 0: the server's default.
			MaxPerClient: opts.TFTPMaxPerClient,
		}

		if opts.IPXEARM64File != "" {
			cfg.Files = map[string]string{arm64TFTPName: opts.IPXEARM64File}
		}

		tftp, err := pxe.NewTFTP(cfg, env.logger.Named("tftp"), metrics)
		if err != nil {
			return nil, fmt.Errorf("error configuring TFTP: %w", err)
		}

		runners = append(runners, runner{name: "tftp", run: tftp.Run})
	}

	return runners, nil
}

// httpBootFiles are the EFI binaries UEFI HTTP boot clients fetch over HTTP, by the
// names the DHCP answers give them: the ones PXE firmware gets over TFTP.
func (env *environment) httpBootFiles() map[string]string {
	opts := env.opts

	files := map[string]string{opts.IPXEUEFIFile: filepath.Join(opts.TFTPRoot, filepath.FromSlash(opts.IPXEUEFIFile))}
	if opts.IPXEARM64File != "" {
		files[arm64TFTPName] = opts.IPXEARM64File
	}

	return files
}

// dhcp builds the ProxyDHCP, or the full DHCP server in full mode, or nothing.
func (env *environment) dhcp(metrics *pxe.Metrics) (*runner, error) {
	opts := env.opts

	iface := opts.DHCPProxyIfaceOrIP
	if iface == "" {
		iface = env.advertise.String()
	}

	cfg := pxe.Config{
		Interface:    iface,
		ScriptURL:    env.scripts.BaseURL + "/ipxe/start.ipxe",
		HTTPBootURL:  env.scripts.BaseURL + "/boot/",
		BIOSBootFile: opts.IPXEBIOSFile,
		UEFIBootFile: opts.IPXEUEFIFile,
		DHCPPort:     opts.DHCPProxyPort,
		PXEPort:      opts.DHCPBootServerPort,
		Trace:        env.trace,
	}

	if env.site != nil {
		// A replica cut off from etcd leaves the machines to the replicas that are not.
		cfg.Serving = env.site.health.Ready
	}

	if opts.IPXEARM64File != "" {
		cfg.ARM64BootFile = arm64TFTPName
	} else if set, ok := env.scripts.Assets.For(pxe.ArchARM64); ok && set.UKIStub != nil {
		// No arm64 iPXE: arm64 HTTP boot starts the agent as a UKI built for the machine.
		cfg.ARM64UKI = true
	}

	if opts.DHCPFull {
		pool, err := env.pool()
		if err != nil {
			return nil, err
		}

		cfg.Pool = pool

		// Checked at start; each term of leadership serves with leases written through
		// its fenced state: two servers on one pool would hand an address out twice.
		if _, err := pxe.NewDHCPServer(cfg, pxe.NewStateLeases(env.store), env.logger.Named("dhcp"), metrics); err != nil {
			return nil, fmt.Errorf("error configuring the DHCP server: %w", err)
		}

		return &runner{name: "dhcp", lead: func(ctx context.Context, st state.State) error {
			srv, err := pxe.NewDHCPServer(cfg, pxe.NewStateLeases(st), env.logger.Named("dhcp"), metrics)
			if err != nil {
				return fmt.Errorf("error configuring the DHCP server: %w", err)
			}

			return srv.Run(ctx)
		}}, nil
	}

	if opts.DisableDHCPProxy {
		return nil, nil //nolint:nilnil // no DHCP service is what was asked for
	}

	proxy, err := pxe.NewProxyDHCP(cfg, env.logger.Named("proxydhcp"), metrics)
	if err != nil {
		return nil, fmt.Errorf("error configuring the ProxyDHCP: %w", err)
	}

	return &runner{name: "proxydhcp", run: proxy.Run}, nil
}

func (env *environment) pool() (*pxe.Pool, error) {
	opts := env.opts

	if opts.DHCPRange == "" {
		return nil, fmt.Errorf("full DHCP mode needs --dhcp-range")
	}

	start, end, err := parseRange(opts.DHCPRange)
	if err != nil {
		return nil, err
	}

	subnet, err := subnetOf(env.advertise)
	if err != nil {
		return nil, fmt.Errorf("error finding the subnet to serve: %w", err)
	}

	pool := &pxe.Pool{Start: start, End: end, Subnet: subnet, LeaseTime: opts.DHCPLeaseTime}

	if opts.DHCPRouter != "" {
		if pool.Router, err = netip.ParseAddr(opts.DHCPRouter); err != nil {
			return nil, fmt.Errorf("invalid --dhcp-router: %w", err)
		}
	}

	for _, s := range opts.DHCPDNS {
		dns, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("invalid --dhcp-dns: %w", err)
		}

		pool.DNS = append(pool.DNS, dns)
	}

	return pool, nil
}
