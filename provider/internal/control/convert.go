package control

import (
	"time"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

var powerFromProto = map[controlv1.PowerState]resources.PowerState{
	controlv1.PowerState_POWER_STATE_DEFAULT: resources.PowerDefault,
	controlv1.PowerState_POWER_STATE_ON:      resources.PowerOn,
	controlv1.PowerState_POWER_STATE_OFF:     resources.PowerOff,
}

var powerToProto = map[resources.PowerState]controlv1.PowerState{
	resources.PowerDefault: controlv1.PowerState_POWER_STATE_DEFAULT,
	resources.PowerOn:      controlv1.PowerState_POWER_STATE_ON,
	resources.PowerOff:     controlv1.PowerState_POWER_STATE_OFF,
}

var acceptanceToProto = map[resources.Acceptance]controlv1.Acceptance{
	resources.AcceptancePending:  controlv1.Acceptance_ACCEPTANCE_PENDING,
	resources.AcceptanceAccepted: controlv1.Acceptance_ACCEPTANCE_ACCEPTED,
	resources.AcceptanceRejected: controlv1.Acceptance_ACCEPTANCE_REJECTED,
}

// intentToProto converts an intent for a reply; the machine config stays behind.
func intentToProto(id string, spec *resources.MachineIntentSpec) *controlv1.MachineIntent {
	out := &controlv1.MachineIntent{
		MachineId:   id,
		Acceptance:  acceptanceToProto[spec.Acceptance],
		Power:       powerToProto[spec.Power],
		WipeId:      spec.WipeID,
		RebootId:    spec.RebootID,
		Cordoned:    spec.Cordoned,
		Labels:      spec.Labels,
		WipeMode:    spec.WipeMode,
		KexecMode:   spec.Kexec,
		BoundEk:     spec.BoundEK,
		WipeScope:   spec.WipeScope,
		WipeKeep:    spec.WipeKeep,
		InstallDisk: spec.InstallDisk,
	}

	if a := spec.Allocation; a != nil {
		out.Allocation = &controlv1.Allocation{
			Id:                 a.ID,
			TalosVersion:       a.TalosVersion,
			SchematicId:        a.SchematicID,
			Extensions:         a.Extensions,
			KernelArgs:         a.KernelArgs,
			ConfigSize:         uint32(len(a.Config)), //nolint:gosec // bounded by MaxConfigSize
			AllocatedAt:        a.AllocatedAt.Format(time.RFC3339),
			DetectedExtensions: a.DetectedExtensions,
			Owner:              a.Owner,
		}

		if d := a.InstallDisk; d != nil {
			out.Allocation.InstallDisk = &controlv1.InstallDisk{Selector: d.Selector, Identity: d.Identity, Disk: d.Disk}
		}
	}

	return out
}
