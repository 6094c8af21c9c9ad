package boot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/siderolabs/image-factory/pkg/schematic"

	"github.com/anvil-metal/anvil/internal/bootparams"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// DiskMethod is how an iPXE client is sent to its own disk.
type DiskMethod string

// Boot-from-disk methods, named like the established provider's.
const (
	DiskIPXEExit    DiskMethod = "ipxe-exit"
	DiskIPXESanboot DiskMethod = "ipxe-sanboot"
	DiskHTTP404     DiskMethod = "http-404"
)

// ParseDiskMethod validates a boot-from-disk method name.
func ParseDiskMethod(s string) (DiskMethod, error) {
	switch m := DiskMethod(s); m {
	case DiskIPXEExit, DiskIPXESanboot, DiskHTTP404:
		return m, nil
	default:
		return "", fmt.Errorf("unknown boot-from-disk method %q (want %s, %s or %s)", s, DiskIPXEExit, DiskIPXESanboot, DiskHTTP404)
	}
}

// Scripts renders iPXE scripts. It is built once at start; its fields do not change once
// it renders (it keeps, besides, the factory's cmdlines it fetched).
type Scripts struct {
	// BaseURL is the provider's HTTP base, e.g. http://10.77.0.1:50042.
	BaseURL string
	// TLSBaseURL is the same over HTTPS (the API port's TLS side), e.g.
	// https://10.77.0.1:50042, where a Talos that can verify it fetches its configuration;
	// EarlyConfig is the talos.config.early value that lets it (the provider's CA as a
	// TrustedRootsConfig). Without both, every Talos fetches it over HTTP.
	TLSBaseURL, EarlyConfig string
	// APIEndpoint is host:port of the provider's API (event sink, agent API).
	APIEndpoint string
	// CAFingerprint is the SHA-256 of the provider's CA certificate, which agents pin.
	CAFingerprint string
	// FactoryPXEBaseURL is the Image Factory PXE base, e.g. https://pxe.factory.talos.dev:
	// without a Cache, machines boot Talos' kernel and initramfs from it, with the cmdline
	// the provider fetched from it.
	FactoryPXEBaseURL string
	// HTTPClient fetches those cmdlines (nil: a client with a timeout).
	HTTPClient *http.Client
	// Platform is the Talos platform booted by PXE (metal).
	Platform string
	// DiskMethod is the default boot-from-disk method.
	DiskMethod DiskMethod
	// Assets are the agent boot assets.
	Assets *AgentAssets
	// Tokens signs agent and metadata tokens (and verifies metadata tokens): one Signer,
	// made at start, so that no script keys an HMAC of its own.
	Tokens *token.Signer
	// TokenKey signs them when Tokens is nil, keying an HMAC for every token (for tests
	// that build Scripts by hand).
	TokenKey []byte
	// AgentKernelArgs follow the agent assets' own cmdline on the agent's kernel line
	// (a site's console, a quirk of its hardware).
	AgentKernelArgs []string
	// TalosKernelArgs come first among every allocation's schematic kernel arguments (a
	// site's serial console): Talos boots with them and installs them.
	TalosKernelArgs []string
	// Cache, when set, keeps the Talos boot assets: Talos boots from the provider's
	// URLs (and kexecs from them) rather than from the Image Factory's.
	Cache AssetCache
	// RegisterSchematic, when set, registers the schematic of a machine's allocation with
	// the Image Factory: a boot asset (or, without a Cache, a cmdline) the factory answers
	// 404 for is fetched again once it is. (alloc may be the boot services' view of it,
	// without its extensions.)
	RegisterSchematic func(ctx context.Context, machineID string, alloc *resources.Allocation) error
	// AgentTalos, when set, boots the agent as Talos in agent mode (--agent-talos-version)
	// rather than from Assets: the factory's Talos for a schematic of Anvil's metal-agent
	// extension, through the Cache (or the factory's PXE endpoint without one).
	AgentTalos *AgentTalos
	// JoinArgs, in Omni mode, gives the kernel args that make the agent join Omni over
	// SideroLink (Omni's join config), false until they are known: the agent is not
	// booted without them, or it would never appear in Omni.
	JoinArgs func() ([]string, bool)

	// cmdlines keeps the factory's cmdlines the boots without a Cache fetched.
	cmdlines factoryCmdlines
}

// Script is a rendered answer to a boot-script request.
type Script struct {
	Status int
	Body   string
	// AgentToken holds the claims of the agent token the script carries, when it boots
	// the agent; the provider records its issue time so that older tokens are superseded.
	AgentToken token.Claims
	// Handoff says the script hands the machine to Talos (rather than one that waits
	// for Talos' boot assets and asks again).
	Handoff bool
}

// StartScript is the script the ProxyDHCP hands to iPXE: it asks iPXE for what
// identifies the machine and chains to the boot script with it. When the boot script
// sends the machine to its disk (it exits, or answers 404), or the provider cannot be
// reached, this script exits too: iPXE hands the machine back to the firmware, which
// tries its next boot device.
//
// It exits with a failure (exit 1), never with success: iPXE returns its exit status to
// the firmware, and UEFI firmware (EDK2/OVMF's BDS, per the UEFI boot manager rules)
// that sees a boot option return EFI_SUCCESS stops walking BootOrder and opens its
// setup UI, so a bare exit would leave the machine in the firmware menu instead of
// on its disk. On failure it tries the next boot option; SeaBIOS does either way.
func (s *Scripts) StartScript() string {
	return "#!ipxe\n" +
		"chain " + s.BaseURL + "/ipxe/boot.ipxe?uuid=${uuid}&mac=${netX/mac:hexhyp}&arch=${buildarch}&platform=${platform} || exit 1\n" +
		"exit 1\n"
}

// Render returns the script for the decision; claims.Issued stamps an agent token. A
// Talos boot from the cache may wait for the assets' download, within ctx.
func (s *Scripts) Render(ctx context.Context, req Request, d lifecycle.BootDecision, claims token.Claims) Script {
	switch d.Boot {
	case lifecycle.BootTalos:
		return s.talosScript(ctx, req, d.Allocation)
	case lifecycle.BootDisk:
		return s.disk()
	default:
		if s.AgentTalos != nil {
			return s.agentTalosScript(ctx, req, claims)
		}

		return s.agent(req, claims)
	}
}

func (s *Scripts) agent(req Request, claims token.Claims) Script {
	set, join, wait, ok := s.agentBoot(req.Arch)
	if !ok {
		return s.agentWaits(wait)
	}

	claims.Kind = token.KindAgent
	claims.MachineID = req.MachineID

	tok := s.sign(claims)
	assets := s.BaseURL + "/assets/agent/"

	// One allocation for the script: it is rendered on every agent boot.
	n := len("#!ipxe\nimgfree\nkernel ") + len(assets) + len(set.Kernel) + len(" initrd=") + len(set.Initramfs) +
		s.agentArgsLen(set.Cmdline, join, req.MachineID, tok) +
		len("\ninitrd ") + len(assets) + len(set.Initramfs) + len("\nboot\n")

	var b strings.Builder

	b.Grow(n)
	b.WriteString("#!ipxe\nimgfree\nkernel ")
	b.WriteString(assets)
	b.WriteString(set.Kernel)
	// Debian's 2019 iPXE needs initrd=<name> on the kernel line under EFI.
	b.WriteString(" initrd=")
	b.WriteString(set.Initramfs)
	s.writeAgentArgs(&b, set.Cmdline, join, req.MachineID, tok)
	b.WriteString("\ninitrd ")
	b.WriteString(assets)
	b.WriteString(set.Initramfs)
	b.WriteString("\nboot\n")

	return Script{Status: http.StatusOK, Body: b.String(), AgentToken: claims}
}

// agentWait says why the agent cannot boot yet, and when to ask again.
type agentWait struct {
	message string
	retry   int // seconds
}

// agentWaits is the script that says why the agent cannot boot yet and asks again in a
// while.
func (s *Scripts) agentWaits(wait agentWait) Script {
	retry := strconv.Itoa(wait.retry)

	return Script{Status: http.StatusOK, Body: "#!ipxe\necho Anvil: " + scriptSafe(wait.message) + "; retrying in " + retry + " s\n" +
		"sleep " + retry + "\n" +
		"chain " + s.BaseURL + "/ipxe/start.ipxe\n"}
}

// agentBoot is what an agent boot of arch needs: its assets and, in Omni mode, Omni's
// join arguments; or why it must wait.
func (s *Scripts) agentBoot(arch string) (AgentAssetSet, []string, agentWait, bool) {
	set, ok := s.Assets.For(arch)
	if !ok {
		// No agent for this architecture: say so on the console and try again later, so
		// the machine boots as soon as the assets are built.
		return set, nil, agentWait{"the provider has no agent boot assets for " + arch + " (make agent-initramfs)", 30}, false
	}

	join, wait, ok := s.agentJoin()

	return set, join, wait, ok
}

// agentJoin is what every agent boot needs in Omni mode: Omni's join arguments, or why it
// must wait for them (none standalone).
func (s *Scripts) agentJoin() ([]string, agentWait, bool) {
	if s.JoinArgs == nil {
		return nil, agentWait{}, true
	}

	join, ok := s.JoinArgs()
	if !ok || !safeArgs(join) {
		return nil, agentWait{"waiting for Omni's join config", 10}, false
	}

	return join, agentWait{}, true
}

// agentArgsLen is the length writeAgentArgs writes.
func (s *Scripts) agentArgsLen(cmdline string, join []string, machineID, tok string) int {
	n := 1 + len(cmdline) + 4*len(" =") + len(bootparams.Provider) + len(s.APIEndpoint) + len(bootparams.CA) +
		len(s.CAFingerprint) + len(bootparams.MachineID) + len(machineID) + len(bootparams.Token) + len(tok)

	for _, arg := range s.AgentKernelArgs {
		n += 1 + len(arg)
	}

	for _, arg := range join {
		n += 1 + len(arg)
	}

	return n
}

// writeAgentArgs writes the agent's kernel arguments, each after a space: the cmdline
// of what boots it (the agent assets', or the factory's for agent-mode Talos), the
// site's, Omni's join arguments, then where the provider is, its CA, the machine and its
// token.
func (s *Scripts) writeAgentArgs(b *strings.Builder, cmdline string, join []string, machineID, tok string) {
	if cmdline != "" {
		b.WriteByte(' ')
		b.WriteString(cmdline)
	}

	for _, args := range [][]string{s.AgentKernelArgs, join} {
		for _, arg := range args {
			b.WriteByte(' ')
			b.WriteString(arg)
		}
	}

	for _, kv := range [...][2]string{
		{bootparams.Provider, s.APIEndpoint}, {bootparams.CA, s.CAFingerprint},
		{bootparams.MachineID, machineID}, {bootparams.Token, tok},
	} {
		b.WriteByte(' ')
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(kv[1])
	}
}

func (s *Scripts) disk() Script {
	switch s.DiskMethod {
	case DiskHTTP404:
		return Script{Status: http.StatusNotFound, Body: "boot from disk\n"}
	case DiskIPXESanboot:
		return Script{Status: http.StatusOK, Body: "#!ipxe\necho Anvil: booting from disk\nsanboot --no-describe --drive 0x80 || exit 1\n"}
	default:
		// A failure status, so that UEFI firmware tries its next boot option (the disk)
		// rather than opening its setup UI: see StartScript.
		return Script{Status: http.StatusOK, Body: "#!ipxe\necho Anvil: booting from disk\nexit 1\n"}
	}
}

// sign returns the token for the claims.
func (s *Scripts) sign(c token.Claims) string {
	if s.Tokens != nil {
		return s.Tokens.Sign(c)
	}

	return token.Sign(s.TokenKey, c)
}

// VerifyToken checks a token the scripts signed and returns its claims.
func (s *Scripts) VerifyToken(tok string) (token.Claims, error) {
	if s.Tokens != nil {
		return s.Tokens.Verify(tok)
	}

	return token.Verify(s.TokenKey, tok)
}

// MetadataClaims are the claims of a machine's metadata token for an allocation, as a
// boot script (iPXE, a UKI's cmdline) carries it.
func MetadataClaims(machineID, allocationID string) token.Claims {
	return token.Claims{Kind: token.KindMetadata, MachineID: machineID, Binding: allocationID}
}

// KexecMetadataClaims are the claims of a machine's metadata token for an allocation, as
// only a kexec order carries it (over the agent's pinned channel, to a proven agent).
func KexecMetadataClaims(machineID, allocationID string) token.Claims {
	return token.Claims{Kind: token.KindKexecMetadata, MachineID: machineID, Binding: allocationID}
}

// Schematic returns the Image Factory schematic an allocation boots: the user's
// extensions, then as kernel arguments the site's (TalosKernelArgs), the allocation's and,
// in Omni mode, Omni's join arguments (SideroLink, Omni's event sink, which counts the
// install, and its kernel log receiver); until the adapter has said them there is no
// schematic to build.
//
// A schematic's kernel arguments are those of every boot of its Talos, installed ones
// included: the factory bakes them into its installer (the UKI's command line Talos
// installs), so an installed Talos boots from its disk with them. Only what holds for
// every such boot belongs here. The boot's own arguments — the metadata URL with the
// machine's token for the allocation, and standalone the provider's event sink — are
// never in it (bootArgs: each boot script, kexec and UKI appends them): an installed
// Talos whose STATE is wiped would otherwise fetch its config from that URL for ever
// instead of entering maintenance mode, and a token would sit in the installer image.
func (s *Scripts) Schematic(extensions, kernelArgs []string) (schematic.Schematic, error) {
	args := append(append([]string{}, s.TalosKernelArgs...), kernelArgs...)

	if s.JoinArgs != nil {
		join, ok := s.JoinArgs()
		if !ok {
			return schematic.Schematic{}, errors.New("Omni's join config is not known yet") //nolint:staticcheck // Omni is a name
		}

		if !safeArgs(join) {
			return schematic.Schematic{}, errors.New("the join config from Omni has an argument a kernel line cannot carry")
		}

		args = append(args, join...)
	}

	var sc schematic.Schematic

	sc.Customization.ExtraKernelArgs = args
	sc.Customization.SystemExtensions.OfficialExtensions = append([]string{}, extensions...)

	return sc, nil
}

// safeArgs says whether every argument is one word an iPXE kernel line can carry: a space
// or a control character would end the argument or the line, and more commands could
// follow it.
func safeArgs(args []string) bool {
	for _, arg := range args {
		if arg == "" || strings.ContainsFunc(arg, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
			return false
		}
	}

	return true
}
