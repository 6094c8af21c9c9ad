package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// pxeStampInterval is how stale Machine.LastPXE may get before a boot rewrites it: a
// machine that boots in a loop must not turn every script request into a disk write.
const pxeStampInterval = 5 * time.Minute

// maxMACs bounds the MACs remembered per machine.
const maxMACs = 16

// PXEObservation is what a boot service saw of a machine asking for its boot script.
type PXEObservation struct {
	MachineID string
	UUID      string
	MAC       string
	Arch      string
	Firmware  string
	Address   string
	Decision  string
	At        time.Time
	// AgentIssued is the issue time of the agent token served, if any.
	AgentIssued time.Time
	// Registered says the machine's agent said hello with a valid token: the machine is
	// recorded whatever the bound on pending machines, and never forgotten. Of a machine
	// recorded already, it tells nothing else.
	Registered bool
}

// MachineController records machines from their PXE boots, and the TPM identity their
// agents proved (RecordEK): it produces Machine.
type MachineController struct {
	Observations <-chan PXEObservation
	// Labels are set on every machine (--machine-labels).
	Labels map[string]string

	// AgentBoots, when set, gives the newest agent token issued to a machine as the boot
	// services know it (machineview.View.AgentBootIssued). A record takes the newest, so
	// that a burst of boot scripts for one machine costs one write, and the sweep records
	// those whose observation was dropped (the boot services' queue full): a token
	// superseded before a restart must stay superseded after it.
	AgentBoots func(id string) time.Time
	// SweepInterval is how often the sweep runs (sweepInterval when 0).
	SweepInterval time.Duration
	// MaxPending bounds the pending machines no agent registered for
	// (DefaultMaxPendingMachines when 0): past it, a boot script asked for a new machine
	// records nothing. PendingTTL is how long such a machine is kept unseen
	// (pendingMachineTTL when 0). See machinesweep.go.
	MaxPending int
	PendingTTL time.Duration

	// pending are the machines MaxPending bounds, with when each was last seen; refused
	// counts the new machines not recorded since the last sweep. Run's alone.
	pending map[resource.ID]time.Time
	refused int

	// held is an observation taken but not recorded when the controller runtime
	// stopped: the next run records it first.
	held atomic.Pointer[PXEObservation]

	eksOnce sync.Once
	eks     *inbox[ekReport]
}

// ekReport is an EK a machine's agent proved.
type ekReport struct {
	machineID, ek string
	at            time.Time
}

// ErrOtherEK is RecordEK's refusal: the machine has another EK recorded.
var ErrOtherEK = errors.New("another TPM EK is recorded for the machine")

// RecordEK records the fingerprint of the EK the machine's agent proved it holds, and
// returns once it is stored. The first EK recorded stays: another is refused with
// ErrOtherEK, never recorded over it.
func (ctrl *MachineController) RecordEK(ctx context.Context, machineID, ek string) error {
	return ctrl.ekInbox().send(ctx, ekReport{machineID: machineID, ek: ek, at: time.Now()})
}

func (ctrl *MachineController) ekInbox() *inbox[ekReport] {
	ctrl.eksOnce.Do(func() { ctrl.eks = newInbox[ekReport]() })

	return ctrl.eks
}

// Name implements controller.Controller.
func (ctrl *MachineController) Name() string { return "MachineController" }

// Inputs implements controller.Controller: observations arrive on a channel, not from
// the state. What a person, Omni or an agent recorded of a machine keeps it from being
// forgotten (machinesweep.go).
func (ctrl *MachineController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: resources.NamespaceName, Type: resources.MachineIntentType, Kind: controller.InputWeak},
		{Namespace: resources.NamespaceName, Type: resources.BMCConfigType, Kind: controller.InputWeak},
		{Namespace: resources.NamespaceName, Type: resources.MachineInventoryType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *MachineController) Outputs() []controller.Output {
	return []controller.Output{{Type: resources.MachineType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *MachineController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	eks := ctrl.ekInbox()

	sweep := time.NewTicker(cmp.Or(ctrl.SweepInterval, sweepInterval))
	defer sweep.Stop()

	// The machines bounded are known before a new one is recorded; stopping is no
	// failure.
	if err := ctrl.sweep(ctx, r, logger); err != nil && ctx.Err() == nil {
		return err
	}

	for {
		if a := eks.takeHeld(); a != nil {
			if eks.finish(ctx, a, ctrl.recordEK(ctx, r, a.report)) {
				return nil
			}

			continue
		}

		obs := ctrl.held.Swap(nil)

		if obs == nil {
			select {
			case <-ctx.Done():
				return nil
			case <-r.EventCh():
				continue
			case <-sweep.C:
				if err := ctrl.sweep(ctx, r, logger); err != nil && ctx.Err() == nil {
					return err
				}

				continue
			case a := <-eks.reports():
				if eks.finish(ctx, &a, ctrl.recordEK(ctx, r, a.report)) {
					return nil
				}

				continue
			case next := <-ctrl.Observations:
				obs = &next
			}
		}

		if err := ctrl.record(ctx, r, *obs); err != nil {
			if ctx.Err() != nil {
				ctrl.held.Store(obs)

				return nil // stopping is not a failure: the observation is held for the next run
			}

			return err
		}
	}
}

func (ctrl *MachineController) record(ctx context.Context, r controller.Runtime, obs PXEObservation) error {
	current, err := safe.ReaderGetByID[*resources.Machine](ctx, r, obs.MachineID)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading machine %s: %w", obs.MachineID, err)
	}

	// The newest token issued, which a queue of this machine's observations holds, is
	// written at once: the rest of the queue then changes nothing.
	if ctrl.AgentBoots != nil {
		if newest := ctrl.AgentBoots(obs.MachineID); newest.After(obs.AgentIssued) {
			obs.AgentIssued = newest
		}
	}

	if current != nil && !obs.Changes(current.TypedSpec()) && ctrl.labelled(current) {
		return nil
	}

	if !ctrl.admit(current, obs) {
		return nil
	}

	if err = modifyShared(ctx, r, resources.NewMachine(obs.MachineID), func(m *resources.Machine) error {
		apply(m.TypedSpec(), obs)

		for k, v := range ctrl.Labels {
			m.Metadata().Labels().Set(k, v)
		}

		return nil
	}); err != nil {
		return fmt.Errorf("error recording machine %s: %w", obs.MachineID, err)
	}

	return nil
}

// recordEK records a proven EK where none is, and refuses another.
func (ctrl *MachineController) recordEK(ctx context.Context, r controller.Runtime, rep ekReport) error {
	current, err := safe.ReaderGetByID[*resources.Machine](ctx, r, rep.machineID)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("error reading machine %s: %w", rep.machineID, err)
	}

	if current != nil {
		switch current.TypedSpec().EK {
		case rep.ek:
			return nil
		case "":
		default:
			return fmt.Errorf("machine %s: %w (%s)", rep.machineID, ErrOtherEK, current.TypedSpec().EK)
		}
	}

	if err = modifyShared(ctx, r, resources.NewMachine(rep.machineID), func(m *resources.Machine) error {
		spec := m.TypedSpec()
		spec.EK, spec.EKRecordedAt = rep.ek, rep.at

		if spec.FirstSeen.IsZero() {
			spec.FirstSeen = rep.at
		}

		for k, v := range ctrl.Labels {
			m.Metadata().Labels().Set(k, v)
		}

		return nil
	}); err != nil {
		return fmt.Errorf("error recording the EK of machine %s: %w", rep.machineID, err)
	}

	return nil
}

func (ctrl *MachineController) labelled(m *resources.Machine) bool {
	for k, v := range ctrl.Labels {
		if got, ok := m.Metadata().Labels().Get(k); !ok || got != v {
			return false
		}
	}

	return true
}

// Changes reports whether the observation tells something the machine's record does not
// say yet; boot services send only those.
func (obs *PXEObservation) Changes(spec *resources.MachineSpec) bool {
	if spec == nil {
		return true
	}

	if obs.Registered {
		return spec.AgentRegistered.IsZero() || obs.AgentIssued.After(spec.AgentBootIssued)
	}

	return len(spec.MACs) == 0 || spec.MACs[0] != obs.MAC ||
		spec.UUID != obs.UUID || spec.Arch != obs.Arch || spec.Firmware != obs.Firmware ||
		spec.LastAddress != obs.Address || spec.LastDecision != obs.Decision ||
		obs.AgentIssued.After(spec.AgentBootIssued) ||
		obs.At.Sub(spec.LastPXE) >= pxeStampInterval
}

func apply(spec *resources.MachineSpec, obs PXEObservation) {
	if obs.AgentIssued.After(spec.AgentBootIssued) {
		spec.AgentBootIssued = obs.AgentIssued
	}

	if obs.Registered {
		if spec.AgentRegistered.IsZero() {
			spec.AgentRegistered = obs.At
		}

		// A machine recorded already: its boots say the rest.
		if !spec.FirstSeen.IsZero() {
			return
		}
	}

	if spec.FirstSeen.IsZero() {
		spec.FirstSeen = obs.At
	}

	spec.UUID = obs.UUID
	spec.Arch = obs.Arch
	spec.Firmware = obs.Firmware
	spec.LastAddress = obs.Address
	spec.LastDecision = obs.Decision

	if obs.At.After(spec.LastPXE) {
		spec.LastPXE = obs.At
	}

	// The booting NIC first; other NICs seen earlier after it.
	spec.MACs = slices.DeleteFunc(spec.MACs, func(mac string) bool { return mac == obs.MAC })
	spec.MACs = append([]string{obs.MAC}, spec.MACs...)

	if len(spec.MACs) > maxMACs {
		spec.MACs = spec.MACs[:maxMACs]
	}
}
