// Command provider runs Anvil's bare-metal provider: PXE boot services, machine state,
// controllers and the control API.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/internal/flagenv"
	"github.com/anvil-metal/anvil/provider/internal/service"
)

// gcPercent is the provider's GOGC unless the environment sets one. Its heap is mostly
// its state, which lives as long as it does: collecting at 75% growth rather than Go's
// 100% keeps its memory near that state for a little CPU (Prometheus does the same).
const gcPercent = 75

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "provider:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	opts := service.DefaultOptions

	var debugLogs bool

	cmd := &cobra.Command{
		Use:           "provider",
		Short:         "Anvil bare-metal provider for Talos Linux",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			// Omni's own variables keep their names, as its tools and the established
			// provider read them.
			if err := flagenv.Apply(cmd.Flags(), map[string][]string{"omni-api-endpoint": {"OMNI_ENDPOINT"}}); err != nil {
				return err
			}

			opts.OmniServiceAccountKey = os.Getenv("OMNI_SERVICE_ACCOUNT_KEY")

			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(debugLogs)
			if err != nil {
				return err
			}

			defer logger.Sync() //nolint:errcheck // syncing stderr fails on terminals (EINVAL); nothing to do at exit

			return service.Run(cmd.Context(), opts, logger)
		},
	}

	f := cmd.Flags()
	f.BoolVar(&debugLogs, "debug", false, "log at debug level, in a human-readable format")
	f.StringVar(&opts.StateDir, "state-dir", opts.StateDir, "directory of the provider's state (database, keys, control socket)")
	f.IntVar(&opts.StateHistory, "state-history", opts.StateHistory,
		"events of each resource type the state keeps for its watchers (more: longer bursts absorbed, more memory)")
	f.DurationVar(&opts.StateBackupInterval, "state-backup-interval", opts.StateBackupInterval,
		"how often the state is backed up into <state-dir>/backups (also once at each start)")
	f.IntVar(&opts.StateBackupKeep, "state-backup-keep", opts.StateBackupKeep, "how many backups of the state <state-dir>/backups keeps")
	f.StringVar(&opts.State, "state", opts.State,
		"where the resources live: bbolt (embedded, in --state-dir) or etcd (replicas of a site on a shared etcd cluster, one elected leader)")
	f.StringSliceVar(&opts.EtcdEndpoints, "etcd-endpoints", opts.EtcdEndpoints, "etcd members' client URLs, https://host:2379 (--state etcd)")
	f.StringVar(&opts.EtcdCA, "etcd-ca", opts.EtcdCA, "CA certificate file of the etcd members (--state etcd)")
	f.StringVar(&opts.EtcdCert, "etcd-cert", opts.EtcdCert, "this replica's etcd client certificate file (--state etcd)")
	f.StringVar(&opts.EtcdKey, "etcd-key", opts.EtcdKey, "this replica's etcd client key file (--state etcd)")
	f.StringVar(&opts.EtcdPrefix, "etcd-prefix", opts.EtcdPrefix, "the site's key prefix in etcd: one per site (--state etcd)")
	f.StringVar(&opts.ReplicaName, "replica-name", opts.ReplicaName, "this replica's name among the site's (the host name when empty)")
	f.DurationVar(&opts.LeaderTTL, "leader-ttl", opts.LeaderTTL, "the leader lease's time to live: a dead leader is replaced after about this long (--state etcd)")
	f.StringVar(&opts.MemoryLimit, "memory-limit", opts.MemoryLimit,
		"soft limit of the provider's memory, a size like 1GiB: Go collects harder as its heap nears it (90% of the cgroup's memory limit when empty; $GOMEMLIMIT wins)")
	f.StringVar(&opts.APIListenAddress, "api-listen-address", opts.APIListenAddress, "IP address the HTTP/gRPC API listens on (all when empty)")
	f.StringVar(&opts.APIAdvertiseAddress, "api-advertise-address", opts.APIAdvertiseAddress,
		"IP address machines reach the provider at (the host's single routable address when empty)")
	f.IntVar(&opts.APIPort, "api-port", opts.APIPort, "port of the HTTP/gRPC API (iPXE scripts, assets, metadata, event sink)")
	f.StringVar(&opts.DHCPProxyIfaceOrIP, "dhcp-proxy-iface-or-ip", opts.DHCPProxyIfaceOrIP,
		"interface, or an IP address on it, the DHCP server listens on (the advertise address when empty)")
	f.BoolVar(&opts.DisableDHCPProxy, "disable-dhcp-proxy", opts.DisableDHCPProxy, "do not run the ProxyDHCP")
	f.IntVar(&opts.DHCPProxyPort, "dhcp-port", opts.DHCPProxyPort, "DHCP port (67 when 0)")
	f.IntVar(&opts.DHCPBootServerPort, "dhcp-boot-server-port", opts.DHCPBootServerPort, "PXE boot-server port (4011 when 0)")
	f.BoolVar(&opts.DHCPFull, "dhcp-full", opts.DHCPFull, "run a full DHCP server handing out addresses from --dhcp-range instead of the ProxyDHCP")
	f.StringVar(&opts.DHCPRange, "dhcp-range", opts.DHCPRange, "address range of full DHCP mode, start-end")
	f.StringVar(&opts.DHCPRouter, "dhcp-router", opts.DHCPRouter, "router (option 3) handed out in full DHCP mode")
	f.StringSliceVar(&opts.DHCPDNS, "dhcp-dns", opts.DHCPDNS, "DNS servers (option 6) handed out in full DHCP mode")
	f.DurationVar(&opts.DHCPLeaseTime, "dhcp-lease-time", opts.DHCPLeaseTime, "lease time in full DHCP mode")
	f.StringVar(&opts.DHCPv6Mode, "dhcpv6-mode", opts.DHCPv6Mode,
		"DHCPv6 on the DHCP interface: off, info (boot URLs only, beside the site's router and DHCPv6 server) or full (addresses from --dhcpv6-prefix too)")
	f.StringVar(&opts.DHCPv6Prefix, "dhcpv6-prefix", opts.DHCPv6Prefix, "the /64 full DHCPv6 mode hands addresses out of, e.g. fd77::/64")
	f.BoolVar(&opts.DisableTFTP, "disable-tftp", opts.DisableTFTP, "do not run the TFTP server")
	f.StringVar(&opts.TFTPListenAddress, "tftp-listen-address", opts.TFTPListenAddress, "UDP address the TFTP server listens on")
	f.StringVar(&opts.TFTPRoot, "tftp-root", opts.TFTPRoot, "directory of the iPXE binaries served over TFTP")
	f.IntVar(&opts.TFTPMaxPerClient, "tftp-max-per-client", opts.TFTPMaxPerClient, "most TFTP transfers in progress from one address (0: 4, a machine's firmware fetches one file at a time; more where machines share an address)")
	f.StringVar(&opts.IPXEBIOSFile, "ipxe-bios-file", opts.IPXEBIOSFile, "iPXE binary for BIOS PXE firmware, in --tftp-root")
	f.StringVar(&opts.IPXEUEFIFile, "ipxe-uefi-file", opts.IPXEUEFIFile, "iPXE binary for x86-64 UEFI PXE firmware, in --tftp-root (snponly.efi or ipxe.efi)")
	f.StringVar(&opts.IPXEARM64File, "ipxe-arm64-file", opts.IPXEARM64File, "path of an iPXE binary for arm64 UEFI PXE firmware (arm64 PXE is not answered when empty)")
	f.StringVar(&opts.BootFromDiskMethod, "boot-from-disk-method", opts.BootFromDiskMethod,
		"how installed and rejected machines are sent to their disk: ipxe-exit, ipxe-sanboot (BIOS) or http-404")
	f.StringVar(&opts.ImageFactoryBaseURL, "image-factory-base-url", opts.ImageFactoryBaseURL, "base URL of the Image Factory")
	f.StringVar(&opts.ImageFactoryPXEBaseURL, "image-factory-pxe-base-url", opts.ImageFactoryPXEBaseURL, "base URL of the Image Factory's PXE endpoint")
	f.StringVar(&opts.ImageCacheDir, "image-cache-dir", opts.ImageCacheDir,
		"directory of the Talos boot assets fetched from the Image Factory and served to machines (<state-dir>/image-cache when empty)")
	f.StringVar(&opts.ImageCacheSize, "image-cache-size", opts.ImageCacheSize,
		"most the image cache holds, least recently used assets evicted first (10GiB, 500MiB, 20GB)")
	f.StringVar(&opts.TalosPlatform, "talos-platform", opts.TalosPlatform, "Talos platform of PXE-booted machines")
	f.StringVar(&opts.AgentAssetsDir, "agent-assets-dir", opts.AgentAssetsDir, "directory of the agent boot assets (vmlinuz-<arch>, initramfs-<arch>.xz, cmdline-<arch>)")
	f.StringVar(&opts.AgentTalosVersion, "agent-talos-version", opts.AgentTalosVersion,
		"boot the agent as Talos of this version (v1.13.9) in agent mode, with Anvil's metal-agent extension, from the Image Factory through the image cache, "+
			"instead of from --agent-assets-dir (such agents cannot kexec: allocations go through the firmware); empty: Anvil's own agent initramfs")
	f.StringSliceVar(&opts.AgentTalosExtensions, "agent-talos-extensions", opts.AgentTalosExtensions,
		"more extensions of the agent's Talos, comma-separated (siderolabs/bnx2-bnx2x,siderolabs/intel-ice-firmware); Anvil's metal-agent extension is always first")
	f.StringVar(&opts.AgentTalosExtensionName, "agent-talos-extension-name", opts.AgentTalosExtensionName,
		"the name the Image Factory knows Anvil's metal-agent extension by: the repository path it was pushed to (make agent-extension PUSH=<registry>/anvil-metal/metal-agent:<tag>)")
	f.StringVar(&opts.AgentKernelArgs, "agent-kernel-args", opts.AgentKernelArgs,
		"kernel arguments added to the agent's kernel line after its assets' own (or the agent's Talos' cmdline), space-separated (e.g. \"console=ttyS1,115200 nomodeset\")")
	f.StringVar(&opts.TalosKernelArgs, "talos-kernel-args", opts.TalosKernelArgs,
		"kernel arguments added to every allocated machine's Talos (its schematic's, so its installed system keeps them too), space-separated: a site's serial console (\"console=ttyS0,115200\")")
	f.StringVar(&opts.WipeMode, "wipe-mode", opts.WipeMode, "how agents wipe disks: fast, zeroes or secure-erase (a machine's own mode wins)")
	f.BoolVar(&opts.WipeRemovable, "wipe-removable", opts.WipeRemovable, "wipe removable media (USB sticks, SD cards) too")
	f.StringVar(&opts.WipeScope, "wipe-scope", opts.WipeScope, "which disks agents wipe: all, install-disk, or all-except (keeping the disks --wipe-keep selects); a machine's own scope wins")
	f.StringVar(&opts.WipeKeep, "wipe-keep", opts.WipeKeep, "with --wipe-scope all-except: a disk selector of the disks wipes keep (e.g. model=ST16000*)")
	f.StringVar(&opts.InstallDisk, "install-disk", opts.InstallDisk, "disk selector of the install disk of allocations that give none (e.g. type=nvme,size>=400GB,pick=smallest)")
	f.StringVar(&opts.RejectedAction, "rejected-action", opts.RejectedAction,
		"what a rejected machine's agent does: reboot (it falls through to its disk) or poweroff")
	f.StringVar(&opts.PowerIdleDefault, "power-idle-default", opts.PowerIdleDefault, "power of an accepted machine with nothing to do: off or on")
	f.StringVar(&opts.Kexec, "kexec", opts.Kexec,
		"how an allocated machine whose agent runs is handed to Talos: auto (kexec unless its hardware is on the deny list), always, never (through the firmware)")
	f.DurationVar(&opts.KexecTimeout, "kexec-timeout", opts.KexecTimeout,
		"how long a kexec'd Talos has to be seen up before the machine is booted through its BMC instead (PXE once, then a cycle)")
	f.DurationVar(&opts.KexecKeepWarm, "kexec-keep-warm", opts.KexecKeepWarm,
		"keep a machine that would idle off powered on, its agent up, this long after its last wipe, for a kexec handoff (0: off)")
	f.BoolVar(&opts.DetectedExtensions, "detected-extensions", opts.DetectedExtensions,
		"add the official extensions a machine's hardware calls for (the extensions catalog) to its allocations")
	f.DurationVar(&opts.PowerPollInterval, "power-poll-interval", opts.PowerPollInterval, "how often each BMC's power state is read")
	f.DurationVar(&opts.MinRebootInterval, "min-reboot-interval", opts.MinRebootInterval, "least time between two power actions on one machine")
	f.IntVar(&opts.PowerConcurrency, "power-concurrency", opts.PowerConcurrency, "most BMCs talked to at once")
	f.DurationVar(&opts.PowerTimeout, "power-timeout", opts.PowerTimeout, "time allowed to each BMC call")
	f.BoolVar(&opts.ProvisionBMCCredentials, "provision-bmc-credentials", opts.ProvisionBMCCredentials,
		"have agents of accepted machines provision an IPMI user (anvil) in-band when nobody gave the BMC's credentials")
	f.BoolVar(&opts.RedfishUseAlways, "redfish-use-always", opts.RedfishUseAlways, "drive IPMI BMCs over Redfish only (same address and credentials)")
	f.BoolVar(&opts.RedfishUseWhenAvailable, "redfish-use-when-available", opts.RedfishUseWhenAvailable,
		"drive IPMI BMCs over Redfish where they answer it, else IPMI")
	f.IntVar(&opts.RedfishPort, "redfish-port", opts.RedfishPort, "Redfish port of BMCs known as IPMI")
	f.BoolVar(&opts.RedfishUseHTTPS, "redfish-use-https", opts.RedfishUseHTTPS, "Redfish over HTTPS for BMCs known as IPMI")
	f.BoolVar(&opts.RedfishInsecureSkipTLSVerify, "redfish-insecure-skip-tls-verify", opts.RedfishInsecureSkipTLSVerify,
		"skip TLS verification of BMCs known as IPMI when driving them over Redfish")
	f.StringVar(&opts.IPMIPXEBootMode, "ipmi-pxe-boot-mode", opts.IPMIPXEBootMode, "boot type of the PXE-once override: auto (the BMC's), bios or uefi")
	f.StringSliceVar(&opts.MachineLabels, "machine-labels", opts.MachineLabels, "labels set on every machine, key=value pairs separated by commas")
	f.IntVar(&opts.MaxPendingMachines, "max-pending-machines", opts.MaxPendingMachines,
		"most pending machines recorded from boot scripts alone (no agent of theirs registered, nothing decided of them): past it a boot script for a new machine "+
			"records nothing until its agent registers; such machines are forgotten after an hour unseen")
	f.StringVar(&opts.AutoAccept, "auto-accept", opts.AutoAccept,
		`accept pending machines once their inventory is in: "all", or those matching a label selector (dc=nyc,anvil.dev/vendor=dell-inc); off when empty. Only machines that proved a TPM identity (anvil.dev/identity=tpm) unless --auto-accept-without-tpm`)
	f.BoolVar(&opts.AutoAcceptWithoutTPM, "auto-accept-without-tpm", opts.AutoAcceptWithoutTPM,
		"let --auto-accept accept machines whose agent proved no TPM identity too (anvil.dev/identity=none)")
	f.BoolVar(&opts.RequireTPM, "require-tpm", opts.RequireTPM,
		"refuse to accept (by hand, auto-accept or Omni) a machine whose agent proved no TPM identity, unless accepted with its EK (anvilctl machine accept --ek)")
	f.StringVar(&opts.ControlSocket, "control-socket", opts.ControlSocket, "Unix socket of the control API (<state-dir>/control.sock when empty)")
	f.StringVar(&opts.ControlListenAddress, "control-listen-address", opts.ControlListenAddress,
		"host:port to serve the control API on over TCP with mutual TLS as well (clients use <state-dir>/ca.crt, admin.crt, admin.key)")
	f.StringVar(&opts.UIListenAddress, "ui-listen-address", opts.UIListenAddress,
		"host:port of the web console over HTTPS (login with the token in <state-dir>/ui-token, or the admin client certificate); off when empty")
	f.StringVar(&opts.UITLSCertFile, "ui-tls-cert-file", opts.UITLSCertFile, "PEM certificate (chain) the console serves instead of one from the provider's CA")
	f.StringVar(&opts.UITLSKeyFile, "ui-tls-key-file", opts.UITLSKeyFile, "PEM key of --ui-tls-cert-file")

	f.StringVar(&opts.OmniAPIEndpoint, "omni-api-endpoint", opts.OmniAPIEndpoint,
		"Omni's API, https://host:port: the provider runs as Omni's static infra provider (also $OMNI_ENDPOINT; the key from $OMNI_SERVICE_ACCOUNT_KEY)")
	f.StringVar(&opts.OmniServiceAccountKeyFile, "omni-service-account-key-file", opts.OmniServiceAccountKeyFile,
		"file holding the infra provider's Omni service account key (else $OMNI_SERVICE_ACCOUNT_KEY)")
	f.StringVar(&opts.ProviderID, "id", opts.ProviderID, "the infra provider's ID in Omni")
	f.StringVar(&opts.ProviderName, "provider-name", opts.ProviderName, "the provider's name as Omni shows it")
	f.StringVar(&opts.ProviderDescription, "provider-description", opts.ProviderDescription, "the provider's description as Omni shows it")
	f.BoolVar(&opts.InsecureSkipTLSVerify, "insecure-skip-tls-verify", opts.InsecureSkipTLSVerify, "skip verifying Omni's TLS certificate")
	f.StringVar(&opts.OmniCACert, "omni-ca-cert", opts.OmniCACert, "PEM file of a CA trusted for Omni's certificate, besides the system's")
	f.StringVar(&opts.OmniAdapter, "omni-adapter", opts.OmniAdapter,
		"the Omni adapter's binary, which the provider runs in Omni mode (omni-adapter beside the provider, then on PATH, when empty)")

	flagenv.Annotate(f)

	return cmd
}

func newLogger(verbose bool) (*zap.Logger, error) {
	cfg := zap.NewProductionConfig()
	if verbose {
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	}

	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.DisableStacktrace = !verbose

	logger, err := cfg.Build()
	if err != nil {
		return nil, fmt.Errorf("error creating the logger: %w", err)
	}

	return logger, nil
}
