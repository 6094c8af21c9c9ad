package lifecycle

import "github.com/anvil-metal/anvil/provider/internal/resources"

// OmniInstalled says whether, in Omni mode, Talos is installed on the machine: Omni
// counts the install events Talos sends it over SideroLink, and Talos is installed once
// Omni has counted more than it had when the machine's last wipe completed (none: zero).
// The provider never sees these events itself: Talos reports to Omni.
func OmniInstalled(omni resources.OmniMachineSpec, status *resources.MachineStatusSpec) bool {
	var atWipe uint64

	if status != nil && status.LastWipe != nil {
		atWipe = status.LastWipe.OmniInstallEvents
	}

	return omni.InstallEventID > atWipe
}
