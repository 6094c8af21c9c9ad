package boot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/image-factory/pkg/schematic"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
)

// Agent-mode Talos (--agent-talos-version) boots the agent the way the established
// provider (siderolabs/omni-infra-provider-bare-metal) boots its own: real Talos in agent
// mode rather than Anvil's initramfs. It is the Image Factory's Talos for a schematic
// whose extensions are Anvil's metal-agent — its flag file /usr/local/etc/is-metal-agent
// puts Talos in agent mode, its extension service runs the agent in its extension mode —
// and any the site adds (firmware), and whose kernel arguments are the site's
// (--talos-kernel-args). Its kernel and initramfs come through the provider's cache as an
// allocation's do; its kernel line is the factory's cmdline, then the agent's per-boot
// arguments (anvil.provider=, anvil.ca=, anvil.machine=, anvil.token= and, in Omni
// mode, Omni's join arguments, which Talos itself joins Omni with). What a machine boots
// (the lifecycle's decision) is the same: only how "the agent" boots changes.

// DefaultAgentExtension is the name the Image Factory knows Anvil's metal-agent extension
// by unless told otherwise: the factory names an extension by its image's repository
// path, and the imager's image is pushed as <registry>/anvil-metal/metal-agent.
const DefaultAgentExtension = "anvil-metal/metal-agent"

// SideroAgentExtension is Sidero Labs' agent for their own bare-metal provider, an
// official extension under the same extension name (metal-agent), which does not speak
// to Anvil: a machine must not carry both.
const SideroAgentExtension = "siderolabs/metal-agent"

// MinAgentTalosVersion is the first Talos with agent mode (the metal-agent flag file),
// as the extension's manifest says.
const MinAgentTalosVersion = "v1.9.0"

// extensionNameRe is a repository path, as the Image Factory names extensions
// (siderolabs/intel-ucode).
var extensionNameRe = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$`)

// AgentTalos is the agent's Talos: a schematic at a version.
type AgentTalos struct {
	// Version is the Talos version booted.
	Version string
	// Schematic is the schematic: Anvil's agent extension first, then the site's others;
	// the site's kernel arguments.
	Schematic schematic.Schematic
	// SchematicID is the schematic's ID.
	SchematicID string
	// Register registers the schematic with the Image Factory (nil: it is not told).
	Register func(ctx context.Context) error
}

// NewAgentTalos checks and builds the agent's Talos: version at least
// MinAgentTalosVersion; agentExtension (Anvil's, as the factory names it) and extra as
// repository paths, none twice and none Sidero Labs' agent; kernelArgs one word each.
func NewAgentTalos(version, agentExtension string, extra, kernelArgs []string) (*AgentTalos, error) {
	v, err := semver.ParseTolerant(version)
	if err != nil || !strings.HasPrefix(version, "v") || (imagecache.Key{Schematic: strings.Repeat("0", 64), Version: version, File: "kernel-amd64"}).Validate() != nil {
		return nil, fmt.Errorf("--agent-talos-version %q is not a Talos version like v1.13.9", version)
	}

	if v.LT(semver.MustParse(strings.TrimPrefix(MinAgentTalosVersion, "v"))) {
		return nil, fmt.Errorf("--agent-talos-version %s has no agent mode: it came with Talos %s", version, MinAgentTalosVersion)
	}

	extensions := append([]string{agentExtension}, extra...)

	var errs []error

	for i, ext := range extensions {
		switch {
		case !extensionNameRe.MatchString(ext):
			errs = append(errs, fmt.Errorf("%q is not an extension name like siderolabs/intel-ucode", ext))
		case ext == SideroAgentExtension:
			errs = append(errs, fmt.Errorf("%s is Sidero Labs' agent for their own provider, which does not speak to Anvil: "+
				"Anvil's metal-agent extension is the agent (--agent-talos-extension-name)", ext))
		case slices.Contains(extensions[:i], ext):
			errs = append(errs, fmt.Errorf("extension %s is named twice", ext))
		}
	}

	if !safeArgs(kernelArgs) {
		errs = append(errs, errors.New("a kernel argument of the agent's Talos is not one word"))
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	var sc schematic.Schematic

	sc.Customization.ExtraKernelArgs = slices.Clone(kernelArgs)
	sc.Customization.SystemExtensions.OfficialExtensions = extensions

	id, err := sc.ID()
	if err != nil {
		return nil, fmt.Errorf("error computing the agent's schematic ID: %w", err)
	}

	return &AgentTalos{Version: version, Schematic: sc, SchematicID: id}, nil
}

// image is the agent's Talos as the cache and the factory know it.
func (a *AgentTalos) image() talosImage {
	return talosImage{schematic: a.SchematicID, version: a.Version, register: a.Register}
}

// IsAgentTalos says whether schematic and version are the agent's Talos.
func (s *Scripts) IsAgentTalos(schematic, version string) bool {
	return s != nil && s.AgentTalos != nil && schematic == s.AgentTalos.SchematicID && version == s.AgentTalos.Version
}

// AgentTalosBoot makes the agent's Talos boot assets for arch ready in the cache (the
// schematic registered with the factory first if it does not know it).
func (s *Scripts) AgentTalosBoot(ctx context.Context, arch string) (TalosBoot, error) {
	if s.AgentTalos == nil {
		return TalosBoot{}, errors.New("the agent does not boot as Talos")
	}

	return s.talosBoot(ctx, s.AgentTalos.image(), arch)
}

// agentTalosScript is the iPXE script that boots the agent as Talos in agent mode with
// the agent's arguments after the factory's cmdline; one that retries while Omni's join
// arguments or the Talos boot assets are not ready.
func (s *Scripts) agentTalosScript(ctx context.Context, req Request, claims token.Claims) Script {
	join, wait, ok := s.agentJoin()
	if !ok {
		return s.agentWaits(wait)
	}

	k, err := s.talosKernelFor(ctx, s.AgentTalos.image(), req.Arch)
	if err != nil {
		return s.agentWaits(agentWait{"the agent's Talos boot assets are not ready (" + err.Error() + ")", 10})
	}

	claims.Kind = token.KindAgent
	claims.MachineID = req.MachineID
	tok := s.sign(claims)

	var b strings.Builder

	b.Grow(len("#!ipxe\nimgfree\nkernel  initrd=\ninitrd \nboot\n") + len(k.kernelURL) + len(k.initramfs) + len(k.initramfsURL) +
		s.agentArgsLen(k.cmdline, join, req.MachineID, tok))
	b.WriteString("#!ipxe\nimgfree\nkernel ")
	b.WriteString(k.kernelURL)
	// Debian's 2019 iPXE needs initrd=<name> on the kernel line under EFI.
	b.WriteString(" initrd=")
	b.WriteString(k.initramfs)
	s.writeAgentArgs(&b, k.cmdline, join, req.MachineID, tok)
	b.WriteString("\ninitrd ")
	b.WriteString(k.initramfsURL)
	b.WriteString("\nboot\n")

	return Script{Status: http.StatusOK, Body: b.String(), AgentToken: claims}
}

// agentTalosUKI is the agent's Talos as a Unified Kernel Image for a UEFI HTTP boot
// client (arm64): the cached kernel and initramfs on the agent assets' UKI stub, the
// factory's cmdline and the agent's arguments as its .cmdline.
func (s *Scripts) agentTalosUKI(ctx context.Context, req Request, claims token.Claims) UKI {
	set, ok := s.Assets.For(req.Arch)
	if !ok || set.UKIStub == nil {
		return UKI{Status: http.StatusServiceUnavailable, Message: "the provider has no UKI stub for " + req.Arch + " (make agent-arm64)"}
	}

	if s.Cache == nil {
		return UKI{Status: http.StatusServiceUnavailable, Message: "the agent's Talos by UEFI HTTP boot needs the image cache"}
	}

	join, wait, ok := s.agentJoin()
	if !ok {
		return UKI{Status: http.StatusServiceUnavailable, Message: wait.message}
	}

	ctx, cancel := context.WithTimeout(ctx, scriptWait)
	defer cancel()

	tb, err := s.talosBoot(ctx, s.AgentTalos.image(), req.Arch)
	if err != nil {
		return UKI{Status: http.StatusServiceUnavailable, Message: "the agent's Talos boot assets are not ready: " + err.Error()}
	}

	claims.Kind = token.KindAgent
	claims.MachineID = req.MachineID
	tok := s.sign(claims)

	var b strings.Builder

	b.Grow(s.agentArgsLen(tb.Cmdline, join, req.MachineID, tok))
	s.writeAgentArgs(&b, tb.Cmdline, join, req.MachineID, tok)

	return UKI{
		Status:     http.StatusOK,
		Served:     lifecycle.BootAgent,
		Stub:       set.UKIStub,
		Kernel:     tb.KernelPath,
		Initramfs:  tb.InitramfsPath,
		Cmdline:    b.String()[1:], // writeAgentArgs puts a space before each argument
		AgentToken: claims,
	}
}
