package transitions

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// SetWipeMode sets how this machine's disks are wiped; empty follows the provider's
// default. It applies to wipes ordered from now on.
func (s *Service) SetWipeMode(ctx context.Context, id, mode string) (*resources.MachineIntentSpec, error) {
	if mode != "" && !slices.Contains(resources.WipeModes, mode) {
		return nil, &Error{Code: CodeInvalid, Msg: fmt.Sprintf("wipe mode %q is not one of %s (or empty for the provider's default)", mode, strings.Join(resources.WipeModes, ", "))}
	}

	return s.transition(ctx, "wipe-mode", id, func(spec *resources.MachineIntentSpec) error {
		spec.WipeMode = mode

		return nil
	})
}

// SetWipeScope sets which of this machine's disks its wipes touch: all, install-disk (the
// disk it last installed to), or all-except the disks keep selects; empty follows the
// provider's --wipe-scope. It applies to wipes ordered from now on.
func (s *Service) SetWipeScope(ctx context.Context, id, scope, keep string) (*resources.MachineIntentSpec, error) {
	if err := lifecycle.ValidWipeScope(scope, keep); err != nil {
		return nil, invalid(err)
	}

	return s.transition(ctx, "wipe-scope", id, func(spec *resources.MachineIntentSpec) error {
		spec.WipeScope, spec.WipeKeep = scope, keep

		return nil
	}, zap.String("scope", scope), zap.String("keep", keep))
}

// SetKexecMode sets how this machine is handed to Talos while its agent runs: auto
// (kexec unless its hardware is on the deny list), always, never (a firmware boot); empty
// follows the provider's --kexec. Anvil's own setting, so it stays local beside Omni.
func (s *Service) SetKexecMode(ctx context.Context, id, mode string) (*resources.MachineIntentSpec, error) {
	if mode != "" && !slices.Contains(resources.KexecModes, mode) {
		return nil, &Error{Code: CodeInvalid, Msg: fmt.Sprintf("kexec mode %q is not one of %s (or empty for the provider's default)", mode, strings.Join(resources.KexecModes, ", "))}
	}

	return s.transition(ctx, "kexec-mode", id, func(spec *resources.MachineIntentSpec) error {
		spec.Kexec = mode

		return nil
	})
}

// SetCordon keeps a machine from being handed out (cordoned) or lifts that.
func (s *Service) SetCordon(ctx context.Context, id string, cordoned bool) (*resources.MachineIntentSpec, error) {
	name := "uncordon"
	if cordoned {
		name = "cordon"
	}

	if err := s.owned(name); err != nil {
		return nil, err
	}

	return s.transition(ctx, name, id, func(spec *resources.MachineIntentSpec) error {
		spec.Cordoned = cordoned
		if !cordoned {
			// An operator who uncordons a held machine has looked at why it was held.
			spec.Held = ""
		}

		return nil
	})
}

// Hold keeps a machine from being handed out, and its allocation from being recorded
// installed, after a security event (reason says which), until an operator uncordons it.
// It is the provider's own safety, so it is never refused for being owned elsewhere
// (Omni decides cordons, not holds); a machine held already keeps its first reason.
func (s *Service) Hold(ctx context.Context, id, reason string) error {
	_, err := s.transition(ctx, "hold", id, func(spec *resources.MachineIntentSpec) error {
		if spec.Held == "" {
			spec.Held = reason
		}

		return nil
	}, zap.String("reason", reason))

	return err
}

// SetPower sets the desired power: on, off, or default (the provider's policy).
func (s *Service) SetPower(ctx context.Context, id string, power resources.PowerState) (*resources.MachineIntentSpec, error) {
	if err := s.owned("power"); err != nil {
		return nil, err
	}

	switch power {
	case resources.PowerOn, resources.PowerOff, resources.PowerDefault:
	default:
		return nil, &Error{Code: CodeInvalid, Msg: "power must be on, off or default"}
	}

	return s.transition(ctx, "power", id, func(spec *resources.MachineIntentSpec) error {
		spec.Power = power

		return nil
	})
}

// Reboot asks for a reboot of an accepted machine, through its BMC (PXE once, then a
// cycle), and returns the request's ID. Pending and rejected machines are never touched.
func (s *Service) Reboot(ctx context.Context, id string) (*resources.MachineIntentSpec, string, error) {
	if err := s.owned("reboot"); err != nil {
		return nil, "", err
	}

	rebootID := NewID()

	spec, err := s.transition(ctx, "reboot", id, func(spec *resources.MachineIntentSpec) error {
		if spec.Acceptance != resources.AcceptanceAccepted {
			return refused(fmt.Sprintf("machine %q is %s: only accepted machines are rebooted", id, spec.Acceptance))
		}

		spec.RebootID = rebootID

		return nil
	})

	return spec, rebootID, err
}
