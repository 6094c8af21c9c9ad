// Package talosversion is the Talos version the agent speaks for: the talos_version it
// gives Omni's Provision API and the tag its maintenance API's Version returns. Omni reads
// both as the machine's Talos version, so they are one constant.
package talosversion

// Tag is the Talos version the agent reports. It is not the Talos the machine will
// run (the provider decides that), but what it takes for Omni to treat the agent as the
// Talos whose API it serves. What Omni does with it, by version:
//
//   - ≥ v1.6: the secure join flow (node unique tokens) at Provision;
//   - ≥ v1.8: no polling of the legacy storage.StorageService/Disks, which the agent
//     does not serve (a failure there would fail Omni's collection);
//   - ≥ v1.13: the status snapshot task reads the boot ID through MachineService/Read,
//     which the agent serves.
//
// The tag shows as Omni's talos-version label; agent mode bypasses Omni's version
// compatibility checks.
const Tag = "v1.13.0"
