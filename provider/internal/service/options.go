// Package service wires the provider together: state, controllers, boot services
// (DHCP, TFTP, HTTP) and the control API. Each concern has its own file; Run starts them
// all and stops them all.
package service

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/cosi-project/runtime/pkg/resource"

	"github.com/anvil-metal/anvil/internal/disksel"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/omnilink"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/pxe"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// The state engines.
const (
	StateBolt = "bbolt"
	StateEtcd = "etcd"
)

// Options configure the provider. Flag names follow the established provider where the
// meaning is the same.
type Options struct {
	StateDir string
	// StateHistory is how many events of each resource type the state keeps for its
	// watchers.
	StateHistory int
	// StateBackupInterval is how often the provider backs its state up into
	// <state-dir>/backups (also once at each start); StateBackupKeep is how many backups
	// are kept there.
	StateBackupInterval time.Duration
	StateBackupKeep     int
	// State is where the resources live: "bbolt" (the embedded store in StateDir) or
	// "etcd" (a site's replicas on a shared etcd cluster; StateDir then keeps the
	// provider key, the control socket and caches only).
	State string
	// Etcd reaches the cluster in etcd mode: the members' https:// endpoints and this
	// replica's mutual-TLS files.
	EtcdEndpoints             []string
	EtcdCA, EtcdCert, EtcdKey string
	// EtcdPrefix is the site's prefix in etcd: the replicas of one site share it, and
	// another site on the same cluster has its own.
	EtcdPrefix string
	// ReplicaName names this replica to the others (the host name when empty).
	ReplicaName string
	// LeaderTTL is the leader lease's time to live: a dead leader is replaced after it.
	LeaderTTL time.Duration
	// MemoryLimit is Go's soft memory limit for the provider, a size like 1GiB; when
	// empty, 90% of its cgroup's memory limit, if any (GOMEMLIMIT, when set, wins).
	MemoryLimit string

	APIListenAddress    string
	APIAdvertiseAddress string
	APIPort             int

	DHCPProxyIfaceOrIP string
	DisableDHCPProxy   bool
	DHCPProxyPort      int
	DHCPBootServerPort int

	// Full DHCP mode: the provider hands out addresses itself.
	DHCPFull      bool
	DHCPRange     string
	DHCPRouter    string
	DHCPDNS       []string
	DHCPLeaseTime time.Duration

	// DHCPv6Mode is off, info (boot URLs only, beside the site's router and DHCPv6) or
	// full (addresses from DHCPv6Prefix too); DHCPv6 serves the DHCP interface.
	DHCPv6Mode   string
	DHCPv6Prefix string

	DisableTFTP       bool
	TFTPListenAddress string
	TFTPRoot          string
	// TFTPMaxPerClient bounds the TFTP transfers in progress from one address; 0 is the
	// server's default (4).
	TFTPMaxPerClient int
	IPXEBIOSFile     string
	IPXEUEFIFile     string
	IPXEARM64File    string

	BootFromDiskMethod string
	// AgentKernelArgs are added to the agent's kernel line, space-separated.
	AgentKernelArgs string
	// TalosKernelArgs are added to every allocation's schematic, before the allocation's
	// own, space-separated.
	TalosKernelArgs        string
	ImageFactoryBaseURL    string
	ImageFactoryPXEBaseURL string
	TalosPlatform          string
	AgentAssetsDir         string
	// AgentTalosVersion, when set, boots the agent as Talos of this version in agent mode
	// (Anvil's metal-agent extension, from the Image Factory through the image cache)
	// instead of from AgentAssetsDir; AgentTalosExtensions are more extensions of it
	// (firmware); AgentTalosExtensionName is the name the factory knows Anvil's extension
	// by.
	AgentTalosVersion       string
	AgentTalosExtensions    []string
	AgentTalosExtensionName string
	// ImageCacheDir holds the Talos boot assets fetched from the factory
	// (<state-dir>/image-cache when empty); ImageCacheSize bounds them, a size like 10GiB.
	ImageCacheDir  string
	ImageCacheSize string

	MachineLabels []string
	// MaxPendingMachines bounds the pending machines recorded from boot scripts alone,
	// no agent of theirs registered (anyone may ask for a boot script for a made-up
	// UUID): past it, a boot script for a new machine records nothing until its agent
	// registers.
	MaxPendingMachines int
	// AutoAccept accepts pending machines matching it once their inventory is in: "" (off),
	// "all", or a label selector (dc=nyc,anvil.dev/vendor=dell-inc). Only machines whose
	// agent proved a TPM identity, unless AutoAcceptWithoutTPM.
	AutoAccept string
	// AutoAcceptWithoutTPM lets AutoAccept accept machines whose agent proved no TPM
	// identity too (identity "none": labs, fleets without TPMs).
	AutoAcceptWithoutTPM bool
	// RequireTPM refuses to accept (by hand, auto-accept or Omni) a machine whose agent
	// proved no TPM identity, unless a person accepts it with its EK's fingerprint.
	RequireTPM bool

	// WipeMode is how agents wipe disks: fast, zeroes or secure-erase.
	WipeMode string
	// WipeRemovable has agents wipe removable media too.
	WipeRemovable bool
	// WipeScope is which disks agents wipe: all, install-disk or all-except (keeping
	// the disks WipeKeep selects); a machine's own scope wins.
	WipeScope string
	WipeKeep  string
	// InstallDisk is the install disk selector of allocations that give none.
	InstallDisk string
	// RejectedAction is what a rejected machine's agent does: reboot (to its disk) or
	// poweroff.
	RejectedAction string

	ControlSocket string
	// ControlListenAddress serves the control API over TCP with mutual TLS as well.
	ControlListenAddress string
	// UIListenAddress serves the web console over HTTPS ("" turns it off); its
	// certificate is the provider CA's unless UITLSCertFile and UITLSKeyFile give one.
	UIListenAddress string
	UITLSCertFile   string
	UITLSKeyFile    string

	// PowerIdleDefault is the power of an accepted machine with nothing to do: off or on.
	PowerIdleDefault string
	// Kexec is how allocated machines whose agent runs are handed to Talos: auto (kexec
	// unless the hardware is on the deny list), always or never (through the firmware).
	Kexec string
	// KexecTimeout bounds a kexec handoff, from the order to Talos seen up; then the
	// machine is booted through its BMC (PXE once, then a cycle).
	KexecTimeout time.Duration
	// KexecKeepWarm keeps a machine that would idle off powered on, its agent up, this
	// long after its last wipe, so that an allocation then is handed over by kexec.
	KexecKeepWarm time.Duration
	// DetectedExtensions adds the official extensions a machine's hardware calls for
	// (the extensions catalog) to its allocations' schematics.
	DetectedExtensions bool
	// PowerPollInterval is how often each BMC's power state is read.
	PowerPollInterval time.Duration
	// MinRebootInterval is the least time between two power actions on one machine.
	MinRebootInterval time.Duration
	// PowerConcurrency bounds the BMCs talked to at once; PowerTimeout each BMC call.
	PowerConcurrency int
	PowerTimeout     time.Duration
	// IPMIPXEBootMode is the boot type of a PXE-once override: auto, bios or uefi.
	IPMIPXEBootMode string
	// Redfish for BMCs known as IPMI (named like the established provider's flags).
	RedfishUseAlways             bool
	RedfishUseWhenAvailable      bool
	RedfishPort                  int
	RedfishUseHTTPS              bool
	RedfishInsecureSkipTLSVerify bool
	// ProvisionBMCCredentials has the agents of accepted machines provision an IPMI user
	// when nobody gave the machine's BMC credentials.
	ProvisionBMCCredentials bool

	// Omni mode: with an endpoint, the provider is Omni's static infra provider.
	OmniAPIEndpoint string
	// OmniServiceAccountKey is the infra provider's key (OMNI_SERVICE_ACCOUNT_KEY, or read
	// from OmniServiceAccountKeyFile); never a flag's value, which ps shows.
	OmniServiceAccountKey     string
	OmniServiceAccountKeyFile string
	// ProviderID is the infra provider's ID in Omni; ProviderName and
	// ProviderDescription how Omni shows it.
	ProviderID          string
	ProviderName        string
	ProviderDescription string
	// InsecureSkipTLSVerify skips verifying Omni's certificate; OmniCACert trusts a CA
	// of the user's for it.
	InsecureSkipTLSVerify bool
	OmniCACert            string
	// OmniAdapter is the Omni adapter's binary; empty looks beside the provider, then on
	// PATH.
	OmniAdapter string
}

// DefaultOptions are the defaults of the provider's flags.
var DefaultOptions = Options{
	StateDir:                "/var/lib/anvil",
	State:                   StateBolt,
	EtcdPrefix:              "/anvil/default",
	LeaderTTL:               10 * time.Second,
	StateHistory:            resources.DefaultHistory,
	StateBackupInterval:     resources.DefaultBackupInterval,
	StateBackupKeep:         resources.DefaultBackupKeep,
	APIPort:                 50042,
	UIListenAddress:         ":50043",
	DHCPLeaseTime:           time.Hour,
	DHCPv6Mode:              "off",
	TFTPListenAddress:       ":69",
	TFTPRoot:                pxe.DefaultTFTPRoot,
	IPXEBIOSFile:            pxe.DefaultBIOSBootFile,
	IPXEUEFIFile:            pxe.DefaultUEFIBootFile,
	BootFromDiskMethod:      string(boot.DiskIPXEExit),
	ImageFactoryBaseURL:     "https://factory.talos.dev",
	ImageFactoryPXEBaseURL:  "https://pxe.factory.talos.dev",
	TalosPlatform:           "metal",
	AgentAssetsDir:          "_out/agent",
	AgentTalosExtensionName: boot.DefaultAgentExtension,
	ImageCacheSize:          "10GiB",
	WipeMode:                "fast",
	WipeScope:               "all",
	RejectedAction:          "reboot",
	PowerIdleDefault:        "off",
	Kexec:                   resources.KexecAuto,
	KexecTimeout:            lifecycle.DefaultKexecTimeout,
	DetectedExtensions:      true,
	PowerPollInterval:       power.DefaultPollInterval,
	MinRebootInterval:       power.DefaultMinActionInterval,
	PowerConcurrency:        power.DefaultConcurrency,
	PowerTimeout:            power.DefaultTimeout,
	IPMIPXEBootMode:         "auto",
	ProvisionBMCCredentials: true,
	MaxPendingMachines:      controllers.DefaultMaxPendingMachines,
	RedfishPort:             443,
	RedfishUseHTTPS:         true,
	ProviderID:              "bare-metal",
	ProviderName:            "Anvil",
	ProviderDescription:     "Bare-metal machines, PXE-booted, inventoried, wiped and powered by Anvil",
}

// parsePolicy reads what the operator chose of every machine: wipes, rejected
// machines, idle power, in-band BMC provisioning.
func parsePolicy(opts Options) (lifecycle.Policy, error) {
	p := lifecycle.Policy{WipeMode: opts.WipeMode, WipeRemovable: opts.WipeRemovable, ProvisionBMC: opts.ProvisionBMCCredentials}

	if !slices.Contains(resources.WipeModes, opts.WipeMode) {
		return p, fmt.Errorf("unknown --wipe-mode %q (want %s)", opts.WipeMode, strings.Join(resources.WipeModes, ", "))
	}

	if err := lifecycle.ValidWipeScope(opts.WipeScope, opts.WipeKeep); err != nil {
		return p, fmt.Errorf("--wipe-scope: %w", err)
	}

	if _, err := disksel.Parse(opts.InstallDisk); err != nil {
		return p, fmt.Errorf("--install-disk: %w", err)
	}

	if opts.WipeScope == resources.WipeScopeInstallDisk && opts.InstallDisk == "" {
		// Machines never allocated have no install disk of their own to wipe.
		return p, errors.New("--wipe-scope install-disk needs --install-disk (the disk of machines never allocated)")
	}

	p.WipeScope, p.WipeKeep, p.InstallDisk = opts.WipeScope, opts.WipeKeep, opts.InstallDisk

	switch opts.RejectedAction {
	case "reboot":
		p.RejectedThen = lifecycle.RejectedReboot
	case "poweroff":
		p.RejectedThen = lifecycle.RejectedPowerOff
	default:
		return p, fmt.Errorf("unknown --rejected-action %q (want reboot or poweroff)", opts.RejectedAction)
	}

	switch opts.PowerIdleDefault {
	case "off":
		p.IdlePower = resources.PowerOff
	case "on":
		p.IdlePower = resources.PowerOn
	default:
		return p, fmt.Errorf("unknown --power-idle-default %q (want off or on)", opts.PowerIdleDefault)
	}

	if !slices.Contains(resources.KexecModes, opts.Kexec) {
		return p, fmt.Errorf("unknown --kexec %q (want %s)", opts.Kexec, strings.Join(resources.KexecModes, ", "))
	}

	if opts.KexecTimeout <= 0 {
		return p, fmt.Errorf("--kexec-timeout must be positive, not %s", opts.KexecTimeout)
	}

	if opts.KexecKeepWarm < 0 {
		return p, fmt.Errorf("--kexec-keep-warm must not be negative, not %s", opts.KexecKeepWarm)
	}

	p.Kexec, p.KexecTimeout, p.KeepWarm = opts.Kexec, opts.KexecTimeout, opts.KexecKeepWarm

	return p, nil
}

// parseLabels parses key=value pairs (a bare key has an empty value). They follow the
// rules of a user's labels: the reserved prefix is the inventory's.
func parseLabels(pairs []string) (map[string]string, error) {
	labels := make(map[string]string, len(pairs))

	for _, pair := range pairs {
		k, v, _ := strings.Cut(pair, "=")
		if k == "" {
			return nil, fmt.Errorf("invalid machine label %q: want key=value", pair)
		}

		if err := resources.ValidateUserLabel(k, v); err != nil {
			return nil, fmt.Errorf("invalid machine label %q: %w", pair, err)
		}

		labels[k] = v
	}

	return labels, nil
}

// autoAcceptAll is the --auto-accept value that accepts every machine.
const autoAcceptAll = "all"

// parseAutoAccept reads --auto-accept: whether it is on, and the selector ("all" is one
// without terms, which matches every machine).
func parseAutoAccept(s string) (bool, resource.LabelQuery, error) {
	s = strings.TrimSpace(s)

	switch s {
	case "":
		return false, resource.LabelQuery{}, nil
	case autoAcceptAll:
		return true, resource.LabelQuery{}, nil
	}

	query, err := resources.ParseSelector(s)
	if err != nil {
		return false, resource.LabelQuery{}, fmt.Errorf("invalid --auto-accept: %w", err)
	}

	return true, query, nil
}

// checkIdentityFlags refuses TPM identity flags that contradict each other.
func checkIdentityFlags(opts Options) error {
	if opts.RequireTPM && opts.AutoAcceptWithoutTPM {
		return errors.New("--require-tpm refuses the machines --auto-accept-without-tpm would accept: give one of them")
	}

	return nil
}

// sizeUnits are the units parseSize knows, lowercase: decimal (K, KB) and binary (Ki,
// KiB), as Kubernetes quantities and disk makers write them.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
}

// parseSize reads a positive size in bytes: 10GiB, 500MiB, 1.5Gi, 20G, 1073741824.
func parseSize(flag, s string) (int64, error) {
	invalid := fmt.Errorf("invalid %s %q: want a positive size like 10GiB, 500MiB or 20GB", flag, s)

	s = strings.TrimSpace(s)
	number := strings.TrimRightFunc(s, unicode.IsLetter)

	unit, ok := sizeUnits[strings.ToLower(strings.TrimSpace(s[len(number):]))]
	if !ok {
		return 0, invalid
	}

	n, err := strconv.ParseFloat(strings.TrimSpace(number), 64)
	if err != nil || math.IsNaN(n) || n*unit < 1 || n*unit >= math.MaxInt64 {
		return 0, invalid
	}

	return int64(n * unit), nil
}

// parseRange parses "start-end".
func parseRange(s string) (netip.Addr, netip.Addr, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("invalid DHCP range %q: want start-end", s)
	}

	start, err := netip.ParseAddr(strings.TrimSpace(a))
	if err != nil {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("invalid DHCP range start: %w", err)
	}

	end, err := netip.ParseAddr(strings.TrimSpace(b))
	if err != nil {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("invalid DHCP range end: %w", err)
	}

	return start, end, nil
}

// parseKernelArgs splits space-separated kernel arguments, refusing a control character
// (a line break would end the iPXE script's kernel line).
func parseKernelArgs(flag, s string) ([]string, error) {
	args := strings.Fields(s)

	for _, arg := range args {
		if strings.ContainsFunc(arg, unicode.IsControl) {
			return nil, fmt.Errorf("--%s: %q has a control character", flag, arg)
		}
	}

	return args, nil
}

// omniAdapter checks the Omni mode's flags and returns how to run the Omni adapter; ok
// is false without an endpoint (standalone).
func omniAdapter(opts Options, version string) (omnilink.Adapter, bool, error) {
	if opts.OmniAPIEndpoint == "" {
		return omnilink.Adapter{}, false, nil
	}

	if opts.AutoAccept != "" || opts.AutoAcceptWithoutTPM {
		return omnilink.Adapter{}, false, errors.New("--auto-accept is for a standalone provider: in Omni mode, Omni owns acceptance")
	}

	if u, err := url.Parse(opts.OmniAPIEndpoint); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "grpc") {
		return omnilink.Adapter{}, false, fmt.Errorf("--omni-api-endpoint %q is not a URL like https://omni.example:443", opts.OmniAPIEndpoint)
	}

	key := opts.OmniServiceAccountKey

	if opts.OmniServiceAccountKeyFile != "" {
		b, err := os.ReadFile(opts.OmniServiceAccountKeyFile)
		if err != nil {
			return omnilink.Adapter{}, false, fmt.Errorf("error reading --omni-service-account-key-file: %w", err)
		}

		key = strings.TrimSpace(string(b))
	}

	if key == "" {
		return omnilink.Adapter{}, false, errors.New("Omni mode needs the infra provider's service account key: OMNI_SERVICE_ACCOUNT_KEY or --omni-service-account-key-file") //nolint:staticcheck // Omni is a name
	}

	if opts.ProviderID == "" {
		return omnilink.Adapter{}, false, errors.New("--id must not be empty")
	}

	bin, err := omnilink.FindBin(opts.OmniAdapter)
	if err != nil {
		return omnilink.Adapter{}, false, err
	}

	args := []string{
		"--omni-api-endpoint", opts.OmniAPIEndpoint, "--id", opts.ProviderID,
		"--provider-name", opts.ProviderName, "--provider-description", opts.ProviderDescription, "--version", version,
	}

	if opts.InsecureSkipTLSVerify {
		args = append(args, "--insecure-skip-tls-verify")
	}

	if opts.OmniCACert != "" {
		ca, err := filepath.Abs(opts.OmniCACert)
		if err != nil {
			return omnilink.Adapter{}, false, fmt.Errorf("invalid --omni-ca-cert: %w", err)
		}

		args = append(args, "--omni-ca-cert", ca)
	}

	return omnilink.Adapter{Bin: bin, Args: args, ServiceAccountKey: key}, true, nil
}
