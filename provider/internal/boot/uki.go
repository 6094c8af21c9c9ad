package boot

import (
	"net/http"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
)

// UKI is the answer to a UEFI HTTP boot client asking for its own Unified Kernel Image
// (arm64, which has no iPXE): what to build it from, or the status to answer instead.
type UKI struct {
	// Status is 200 when the image is to be served; 404 sends the firmware on to its
	// disk; 503 says the agent cannot boot yet (Message says why).
	Status  int
	Message string
	// Served is what the image boots: the agent, also for a machine whose decision is
	// Talos (it has no iPXE to chain Talos with: the agent hands over by kexec).
	Served lifecycle.Boot
	// Stub, Kernel and Initramfs are the files the image is made of.
	Stub, Kernel, Initramfs string
	// Cmdline is the image's .cmdline: HTTP boot passes it no load options.
	Cmdline string
	// AgentToken holds the claims of the agent token Cmdline carries.
	AgentToken token.Claims
}

// RenderUKI is Render for a UEFI HTTP boot client that starts a UKI with no loader.
func (s *Scripts) RenderUKI(req Request, d lifecycle.BootDecision, claims token.Claims) UKI {
	if d.Boot == lifecycle.BootDisk {
		return UKI{Status: http.StatusNotFound, Message: "boot from disk", Served: lifecycle.BootDisk}
	}

	set, join, wait, ok := s.agentBoot(req.Arch)
	if !ok {
		return UKI{Status: http.StatusServiceUnavailable, Message: wait.message}
	}

	if set.UKIStub == "" {
		return UKI{Status: http.StatusServiceUnavailable, Message: "the provider has no UKI stub for " + req.Arch + " (make agent-arm64)"}
	}

	claims.Kind = token.KindAgent
	claims.MachineID = req.MachineID
	tok := s.sign(claims)

	var b strings.Builder

	b.Grow(s.agentArgsLen(set, join, req.MachineID, tok))
	s.writeAgentArgs(&b, set, join, req.MachineID, tok)

	return UKI{
		Status:     http.StatusOK,
		Served:     lifecycle.BootAgent,
		Stub:       filepath.Join(s.Assets.Dir, set.UKIStub),
		Kernel:     filepath.Join(s.Assets.Dir, set.Kernel),
		Initramfs:  filepath.Join(s.Assets.Dir, set.Initramfs),
		Cmdline:    b.String()[1:], // writeAgentArgs puts a space before each argument
		AgentToken: claims,
	}
}
