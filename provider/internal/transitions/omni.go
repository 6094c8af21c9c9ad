package transitions

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// Identifiers of the intent derived from Omni's: stable, so that applying the same
// OmniMachine again (after a restart, on every resync) changes nothing.
const (
	omniIDPrefix = "omni:"
	// omniInitialWipe is the wipe acceptance owes in Omni mode, before Omni has ever
	// named one (its wipe_id is empty until the first deallocation).
	omniInitialWipe = omniIDPrefix + "initial"
)

// ApplyOmni makes Omni's decisions (its infra.Machine, as the adapter reported it) the
// machine's intent: acceptance, allocation, power,
// the wipe owed, reboot requests and cordon. It is the owner's transition (see Owner):
// refused on a view whose ManagedBy names another owner. Applying the same OmniMachine
// twice changes nothing; what Omni does not decide (labels, wipe mode) is kept.
func (s *Service) ApplyOmni(ctx context.Context, id string, o resources.OmniMachineSpec) (*resources.MachineIntentSpec, error) {
	if err := s.owned("Omni's decisions"); err != nil {
		return nil, err
	}

	if err := ValidateOmni(id, o); err != nil {
		return nil, invalid(err)
	}

	cur, err := s.current(ctx, id)
	if err != nil {
		return nil, err
	}

	if localAllocation(cur.Allocation) {
		return nil, heldLocally(id)
	}

	// Omni's acceptance binds the machine's TPM identity as a person's does.
	recorded, err := s.recordedEK(ctx, id)
	if err != nil {
		return nil, err
	}

	// A new allocation is built (validated, its schematic computed) outside the change,
	// which runs under the lock; the change keeps the current one when Omni's is the same.
	var alloc *resources.Allocation

	if omniAllocates(o) && !sameAllocation(cur.Allocation, o) {
		if alloc, err = s.newAllocation(ctx, id, AllocationRequest{
			TalosVersion: o.ClusterTalosVersion, Extensions: o.Extensions, KernelArgs: strings.Fields(o.ExtraKernelArgs),
			configChoosesDisk: true,
		}); err != nil {
			return nil, err
		}

		alloc.ID = omniAllocationPrefix + alloc.ID
	}

	return s.transition(ctx, "omni", id, func(spec *resources.MachineIntentSpec) error {
		// Checked again under the lock: a local allocation is never overridden.
		if localAllocation(spec.Allocation) {
			return heldLocally(id)
		}

		next := omniIntent(*spec, o, alloc)

		if next.Acceptance == resources.AcceptanceAccepted && spec.Acceptance != resources.AcceptanceAccepted {
			bound, err := bindEK(id, *spec, recorded, "", s.requireTPM)
			if err != nil {
				return err
			}

			next.BoundEK = bound
		}

		*spec = next

		return nil
	}, zap.String("omni_wipe_id", o.WipeID), zap.String("talos_version", o.ClusterTalosVersion))
}

// omniIntent is the rule of ApplyOmni: the intent that carries out o, from the current
// one; alloc is the allocation to use when o allocates and cur's does not match it.
func omniIntent(cur resources.MachineIntentSpec, o resources.OmniMachineSpec, alloc *resources.Allocation) resources.MachineIntentSpec {
	next := cur
	next.Acceptance = o.Acceptance
	next.Cordoned = o.Cordoned

	if o.Acceptance != resources.AcceptanceAccepted {
		// Pending or rejected: nothing is handed out, nothing powered.
		next.Allocation = nil
		next.Power, next.IdlePower = resources.PowerDefault, ""

		return next
	}

	// The wipe owed: the initial one until Omni names one, then each of Omni's.
	// Acceptance in Omni mode always owes it: Omni cannot tell the disks are empty.
	next.WipeID = omniInitialWipe
	if o.WipeID != "" {
		next.WipeID = omniIDPrefix + o.WipeID
	}

	switch {
	case !omniAllocates(o):
		next.Allocation = nil
	case sameAllocation(cur.Allocation, o):
		next.Allocation = cur.Allocation
	default:
		next.Allocation = alloc
	}

	// Omni's power-off request overrides everything (the machine stays off whatever its
	// allocation wants); its preferred power state is the machine's idle power: a
	// machine with work (a wipe, an allocation) is on whatever Omni prefers for it idle.
	next.Power = resources.PowerDefault
	if o.PowerOffRequestID != "" {
		next.Power = resources.PowerOff
	}

	next.IdlePower = ""
	if o.PreferredPower == resources.PowerOn || o.PreferredPower == resources.PowerOff {
		next.IdlePower = o.PreferredPower
	}

	// Omni's reboot request; a new wipe Omni names (a deallocation) reboots the machine
	// too, so that it leaves the Talos Omni reset for the agent that wipes it. The
	// initial wipe needs none: an accepted machine's agent is running already.
	var reboot []string

	if o.RequestedRebootID != "" {
		reboot = append(reboot, "reboot="+o.RequestedRebootID)
	}

	if o.WipeID != "" {
		reboot = append(reboot, "wipe="+o.WipeID)
	}

	next.RebootID = ""
	if len(reboot) > 0 {
		next.RebootID = omniIDPrefix + strings.Join(reboot, ",")
	}

	return next
}

// OmniRebootRequest is Omni's reboot request in a reboot request ID ApplyOmni made
// ("omni:reboot=<id>,wipe=<id>"), and whether there is one.
func OmniRebootRequest(rebootID string) (string, bool) {
	rest, ok := strings.CutPrefix(rebootID, omniIDPrefix)
	if !ok {
		return "", false
	}

	for part := range strings.SplitSeq(rest, ",") {
		if v, ok := strings.CutPrefix(part, "reboot="); ok {
			return v, true
		}
	}

	return "", false
}

// The adoption rules, switching a provider with standalone state to Omni mode:
//
//   - A machine Omni does not have keeps its intent: Omni decides nothing of it until
//     it joins Omni (its agent boots and provisions with Omni's join token).
//   - A machine holding an allocation made locally is never changed by Omni's
//     decisions (ApplyOmni refuses with CodeRefused, saying so): a tenant's Talos is
//     never wiped because Omni names a wipe or knows no cluster for it. Deallocating it
//     locally — the one local transition Omni mode allows for such a machine — owes
//     the wipe, and the machine goes back to the agent; from then on Omni decides.
//   - Accepted by Omni, an adopted machine owes Omni's initial wipe even when it was
//     wiped locally: Omni cannot know what its disks hold.
//
// The way back (Omni mode to standalone) needs no rule: the intents stay as Omni's
// decisions left them, and the local control decides again.

// omniAllocationPrefix marks the allocations ApplyOmni makes: any other was made
// locally.
const omniAllocationPrefix = "omni-"

// localAllocation says whether a is an allocation the local control made.
func localAllocation(a *resources.Allocation) bool {
	return a != nil && !strings.HasPrefix(a.ID, omniAllocationPrefix)
}

// LocalAllocation says whether a is an allocation the local control made, which Omni
// may neither change nor count on: its machine is not Omni's to use.
func LocalAllocation(a *resources.Allocation) bool { return localAllocation(a) }

// heldLocally is ApplyOmni's refusal of a machine under a local allocation.
func heldLocally(id string) error {
	return refused(fmt.Sprintf("machine %q holds an allocation made before Omni managed this provider: "+
		"deallocate it locally (anvilctl machine deallocate) to hand it to Omni", id))
}

// omniAllocates says whether Omni has allocated the machine to a cluster.
func omniAllocates(o resources.OmniMachineSpec) bool { return o.ClusterTalosVersion != "" }

// sameAllocation says whether the allocation a is the one Omni asks for: same Talos
// version, extensions and kernel args. Keeping it keeps its ID, to which the metadata
// token and the install are bound.
func sameAllocation(a *resources.Allocation, o resources.OmniMachineSpec) bool {
	if a == nil {
		return false
	}

	version, err := validateTalosVersion(o.ClusterTalosVersion)
	if err != nil {
		return false
	}

	exts, err := validateExtensions(o.Extensions)
	if err != nil {
		return false
	}

	args := strings.Fields(o.ExtraKernelArgs)

	return a.TalosVersion == version && slices.Equal(a.Extensions, exts) && slices.Equal(a.KernelArgs, args)
}

// ValidateOmni checks what the adapter passed on of Omni's resource: the adapter API
// refuses what fails it, and ApplyOmni checks it again.
func ValidateOmni(id string, o resources.OmniMachineSpec) error {
	if err := validateMachineID(id); err != nil {
		return fmt.Errorf("the infra machine from Omni: %w", err)
	}

	if err := validateOmniSpec(o); err != nil {
		return fmt.Errorf("the infra machine %s from Omni: %w", id, err)
	}

	return nil
}

func validateOmniSpec(o resources.OmniMachineSpec) error {
	switch o.Acceptance {
	case resources.AcceptancePending, resources.AcceptanceAccepted, resources.AcceptanceRejected:
	default:
		return fmt.Errorf("unknown acceptance %q", o.Acceptance)
	}

	switch o.PreferredPower {
	case "", resources.PowerDefault, resources.PowerOn, resources.PowerOff:
	default:
		return fmt.Errorf("unknown preferred power state %q", o.PreferredPower)
	}

	if len(o.NodeUniqueToken) > maxOmniToken {
		return fmt.Errorf("node_unique_token is longer than %d bytes", maxOmniToken)
	}

	for name, id := range map[string]string{"wipe_id": o.WipeID, "requested_reboot_id": o.RequestedRebootID, "power_off_request_id": o.PowerOffRequestID} {
		if len(id) > maxOmniID || strings.ContainsAny(id, ",\n") {
			return fmt.Errorf("%s: not an id (at most %d characters, no comma or newline)", name, maxOmniID)
		}
	}

	return nil
}

// Bounds of what Omni sends: ids (UUIDs and xids in practice) and the node unique
// token (a JSON object of a fingerprint and a UUID, ~120 bytes).
const (
	maxOmniID    = 128
	maxOmniToken = 1024
)
