// Package maintenance serves the agent's Talos-compatible maintenance API, so that
// Omni and talosctl see an agent-booted machine as Talos in maintenance mode, in
// agent mode: gRPC over TLS with a self-signed certificate and no client
// certificate asked for, on the SideroLink address, port 50000 (Listen).
//
// Two services: cosi.resource.State, read-only, over the agent's state (the
// inventory's types, and the machine and metal-agent extension statuses this
// package writes); and machine.MachineService with Version and Read of the boot
// ID. Every other method answers Unimplemented, and every other service too.
//
// What Omni v1.9.3 calls on such a machine, and the answers (Omni's collect task,
// its status snapshot task, its reset on deallocation, its UI through its proxy):
//
//   - State/List meta ResourceDefinitions: the definitions of the served types,
//     exactly; Omni then watches and polls only those.
//   - State/Watch (a kind) of Hostname-, Link-, RouteStatuses, NodeAddresses,
//     Processors, MemoryModules, PlatformMetadatas, ExtensionStatuses,
//     MachineStatuses and Disks: a bootstrapped watch, then changes.
//     MetaKeys and Diagnostics are not defined, so Omni does not ask for them.
//   - State/List of each of those types and of KernelCmdlines: the resources.
//   - State/Get runtime SystemDisks system-disk: NotFound, which Omni takes as "no
//     system disk".
//   - State/Get meta ResourceDefinitions securitystates.talos.dev: NotFound, so Omni
//     records secure boot and UKI as off without asking for the SecurityState.
//   - State/Watch runtime MachineStatuses machine: stage maintenance, ready; the
//     snapshot Omni makes of it is what lets the machine be allocated.
//   - MachineService/Version: tag TalosVersion, the machine's architecture,
//     platform metal in mode metal-agent. Also Omni's "already in maintenance,
//     nothing to reset" check when a cluster lets the machine go.
//   - State/Get and List of anything the UI asks for (SystemInformation,
//     PCIDevices, ...): the resource if its type is served, else NotFound.
//
// Not called in agent mode, answered anyway: State/Get config MachineConfigs
// v1alpha1 (NotFound) and MachineService/ApplyConfiguration (Unimplemented), both
// tolerated by Omni. Called by Omni after v1.9.3: MachineService/Read of the boot ID
// (served). Called only when the machine joins without a node unique token:
// StorageService/Disks and MachineService/MetaWrite (Unimplemented: the agent
// joins with a token). State writes: PermissionDenied.
package maintenance
