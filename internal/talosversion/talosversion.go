// Package talosversion is the Talos version the agent speaks for: the talos_version it
// gives Omni's Provision API and the tag its maintenance API's Version returns. Omni reads
// both as the machine's Talos version, so they are one constant.
package talosversion

// Tag is the Talos version the agent reports. What Omni does with it, by version:
//
//   - ≥ v1.6: the secure join flow (node unique tokens) at Provision;
//   - ≥ v1.8: no polling of the legacy storage.StorageService/Disks, which the agent
//     does not serve;
//   - ≥ v1.13: the status snapshot task reads /proc/sys/kernel/random/boot_id through
//     MachineService/Read.
//
// It is the Talos the project tests against (talosctl v1.13.9). Agent mode bypasses
// Omni's version compatibility checks, so it needs not match what is installed later.
const Tag = "v1.13.9"
