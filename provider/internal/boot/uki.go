package boot

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// UKI is the answer to a UEFI HTTP boot client asking for its own Unified Kernel Image
// (arm64, which has no iPXE): what to build it from, or the status to answer instead.
type UKI struct {
	// Status is 200 when the image is to be served; 404 sends the firmware on to its
	// disk; 503 says the agent cannot boot yet (Message says why).
	Status  int
	Message string
	// Served is what the image boots: the agent, or Talos from the provider's cache (a
	// UKI of the allocation's kernel, initramfs and cmdline). Without a cache a machine
	// whose decision is Talos gets the agent, which hands over by kexec.
	Served lifecycle.Boot
	// Stub is the image's EFI stub; Kernel and Initramfs are the files it carries.
	Stub              []byte
	Kernel, Initramfs string
	// Cmdline is the image's .cmdline: HTTP boot passes it no load options.
	Cmdline string
	// AgentToken holds the claims of the agent token Cmdline carries.
	AgentToken token.Claims
}

// RenderUKI is Render for a UEFI HTTP boot client that starts a UKI with no loader. A
// Talos boot from the cache may wait for the assets' download, within ctx.
func (s *Scripts) RenderUKI(ctx context.Context, req Request, d lifecycle.BootDecision, claims token.Claims) UKI {
	if d.Boot == lifecycle.BootDisk {
		return UKI{Status: http.StatusNotFound, Message: "boot from disk", Served: lifecycle.BootDisk}
	}

	if d.Boot == lifecycle.BootTalos && s.Cache != nil {
		return s.talosUKI(ctx, req, d.Allocation)
	}

	if s.AgentTalos != nil {
		return s.agentTalosUKI(ctx, req, claims)
	}

	set, join, wait, ok := s.agentBoot(req.Arch)
	if !ok {
		return UKI{Status: http.StatusServiceUnavailable, Message: wait.message}
	}

	if set.UKIStub == nil {
		return UKI{Status: http.StatusServiceUnavailable, Message: "the provider has no UKI stub for " + req.Arch + " (make agent-arm64)"}
	}

	claims.Kind = token.KindAgent
	claims.MachineID = req.MachineID
	tok := s.sign(claims)

	var b strings.Builder

	b.Grow(s.agentArgsLen(set.Cmdline, join, req.MachineID, tok))
	s.writeAgentArgs(&b, set.Cmdline, join, req.MachineID, tok)

	return UKI{
		Status:     http.StatusOK,
		Served:     lifecycle.BootAgent,
		Stub:       set.UKIStub,
		Kernel:     filepath.Join(s.Assets.Dir, set.Kernel),
		Initramfs:  filepath.Join(s.Assets.Dir, set.Initramfs),
		Cmdline:    b.String()[1:], // writeAgentArgs puts a space before each argument
		AgentToken: claims,
	}
}

// talosUKI is the allocation's Talos as a UKI: the cached kernel and initramfs, and the
// cmdline the iPXE path boots with (the factory's, then the boot's own arguments), as a
// kexec's is.
func (s *Scripts) talosUKI(ctx context.Context, req Request, alloc *resources.Allocation) UKI {
	set, ok := s.Assets.For(req.Arch)
	if !ok || set.UKIStub == nil {
		return UKI{Status: http.StatusServiceUnavailable, Message: "the provider has no UKI stub for " + req.Arch + " (make agent-arm64)"}
	}

	ctx, cancel := context.WithTimeout(ctx, scriptWait)
	defer cancel()

	tb, err := s.TalosBoot(ctx, req.MachineID, alloc, req.Arch)
	if err != nil {
		return UKI{Status: http.StatusServiceUnavailable, Message: "the Talos boot assets are not ready: " + err.Error()}
	}

	cmdline, err := s.talosCmdline("", tb.Cmdline, alloc.TalosVersion, MetadataClaims(req.MachineID, alloc.ID))
	if err != nil {
		return UKI{Status: http.StatusServiceUnavailable, Message: err.Error()}
	}

	return UKI{
		Status:    http.StatusOK,
		Served:    lifecycle.BootTalos,
		Stub:      set.UKIStub,
		Kernel:    tb.KernelPath,
		Initramfs: tb.InitramfsPath,
		Cmdline:   cmdline,
	}
}
