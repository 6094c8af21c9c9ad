package redfish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/anvil-metal/anvil/provider/internal/power"
)

// resetAction is the system's Reset action as its document describes it.
type resetAction struct {
	target string
	// allowed are the listed reset types; nil when the BMC lists none.
	allowed []schemas.ResetType
}

func (c *client) load(ctx context.Context) (*schemas.ComputerSystem, resetAction, error) {
	sys, err := schemas.GetObject[schemas.ComputerSystem](c.api.WithContext(ctx), c.system)
	if err != nil {
		return nil, resetAction{}, classify(ctx, "reading the Redfish system "+c.system, err)
	}

	var doc struct {
		Actions struct {
			Reset struct {
				Target  string              `json:"target"`
				Allowed []schemas.ResetType `json:"ResetType@Redfish.AllowableValues"`
			} `json:"#ComputerSystem.Reset"`
		}
	}

	// The document decoded once already; the action's target is not exported by gofish.
	if err := json.Unmarshal(sys.RawData, &doc); err != nil {
		return nil, resetAction{}, fmt.Errorf("error reading the Reset action of %s: %w", c.system, err)
	}

	return sys, resetAction{target: doc.Actions.Reset.Target, allowed: doc.Actions.Reset.Allowed}, nil
}

func stateOf(sys *schemas.ComputerSystem) (bool, error) {
	switch sys.PowerState {
	case schemas.OnPowerState, schemas.PoweringOnPowerState:
		return true, nil
	case schemas.OffPowerState, schemas.PoweringOffPowerState:
		return false, nil
	default:
		return false, fmt.Errorf("the Redfish system %s reports the power state %q", sys.ODataID, sys.PowerState)
	}
}

// PowerState reads the system's power state.
func (c *client) PowerState(ctx context.Context) (bool, error) {
	sys, _, err := c.load(ctx)
	if err != nil {
		return false, err
	}

	return stateOf(sys)
}

// PowerOn powers an off machine on.
func (c *client) PowerOn(ctx context.Context) error {
	sys, action, err := c.load(ctx)
	if err != nil {
		return err
	}

	if on, err := stateOf(sys); err == nil && on {
		return nil
	}

	return c.reset(ctx, sys, action, schemas.OnResetType, schemas.ForceOnResetType, schemas.PushPowerButtonResetType)
}

// PowerOff cuts a running machine's power.
func (c *client) PowerOff(ctx context.Context) error {
	sys, action, err := c.load(ctx)
	if err != nil {
		return err
	}

	if on, err := stateOf(sys); err == nil && !on {
		return nil
	}

	return c.reset(ctx, sys, action, schemas.ForceOffResetType)
}

// PowerCycle restarts a running machine with whatever the BMC offers: ForceRestart,
// else PowerCycle, else ForceOff and On. A machine that is off is powered on.
func (c *client) PowerCycle(ctx context.Context) error {
	sys, action, err := c.load(ctx)
	if err != nil {
		return err
	}

	if on, err := stateOf(sys); err == nil && !on {
		return c.reset(ctx, sys, action, schemas.OnResetType, schemas.ForceOnResetType, schemas.PushPowerButtonResetType)
	}

	err = c.reset(ctx, sys, action, schemas.ForceRestartResetType, schemas.PowerCycleResetType)
	if !errors.Is(err, power.ErrUnsupported) {
		return err
	}

	if err := c.reset(ctx, sys, action, schemas.ForceOffResetType); err != nil {
		return err
	}

	// The BMC may take a moment to report the machine off, and refuse On until it does.
	if err := c.waitOff(ctx); err != nil {
		return err
	}

	return c.reset(ctx, sys, action, schemas.OnResetType, schemas.ForceOnResetType)
}

func (c *client) waitOff(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, offWait)
	defer cancel()

	for {
		on, err := c.PowerState(ctx)
		if err != nil {
			return err
		}

		if !on {
			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("error waiting for %s to power off: %w: %w", c.system, power.ErrUnreachable, ctx.Err())
		case <-time.After(offPoll):
		}
	}
}

// reset runs the first of the reset types the system offers. A BMC that lists no
// types is tried type by type, taking a refusal (400, 405, 501) as "not this one".
func (c *client) reset(ctx context.Context, sys *schemas.ComputerSystem, action resetAction, types ...schemas.ResetType) error {
	if action.target == "" {
		return fmt.Errorf("%w: the Redfish system %s has no Reset action", power.ErrUnsupported, sys.ODataID)
	}

	for _, rt := range types {
		if action.allowed != nil && !slices.Contains(action.allowed, rt) {
			continue
		}

		_, err := sys.Reset(rt)
		if err == nil {
			return nil
		}

		switch statusOf(err) {
		case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusNotImplemented:
			if action.allowed == nil {
				continue
			}
		}

		return classify(ctx, fmt.Sprintf("resetting %s (%s)", sys.ODataID, rt), err)
	}

	return fmt.Errorf("%w: the Redfish system %s offers none of the reset types %v (it offers %v)",
		power.ErrUnsupported, sys.ODataID, types, action.allowed)
}

// SetPXEOnce makes the next boot a network boot, in the given mode where the BMC has
// boot modes.
func (c *client) SetPXEOnce(ctx context.Context, mode power.BootMode) error {
	modes := map[power.BootMode]schemas.BootSourceOverrideMode{
		power.BootModeAuto:   "",
		power.BootModeLegacy: schemas.LegacyBootSourceOverrideMode,
		power.BootModeUEFI:   schemas.UEFIBootSourceOverrideMode,
	}

	want, ok := modes[mode]
	if !ok {
		return fmt.Errorf("unknown boot mode %q (legacy, uefi or empty for the BMC's choice)", mode)
	}

	sys, _, err := c.load(ctx)
	if err != nil {
		return err
	}

	if targets := sys.Boot.AllowableBootSourceOverrideTargetValues; len(targets) > 0 && !slices.Contains(targets, schemas.PxeBootSource) {
		return fmt.Errorf("%w: the Redfish system %s offers no Pxe boot override (it offers %v)", power.ErrUnsupported, sys.ODataID, targets)
	}

	boot := &schemas.Boot{
		BootSourceOverrideTarget:  schemas.PxeBootSource,
		BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled,
	}

	// A BMC whose Boot has no BootSourceOverrideMode does not take one: the firmware
	// boots the way it is set up.
	if sys.Boot.BootSourceOverrideMode != "" {
		boot.BootSourceOverrideMode = want
	}

	if err := sys.SetBoot(boot); err != nil {
		return classify(ctx, "setting the PXE boot override of "+sys.ODataID, err)
	}

	return nil
}
