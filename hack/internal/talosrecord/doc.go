// Package talosrecord records real Talos' answers and events, so that the stand-in Talos
// (hack/cmd/talos-standin, with internal/maintenance's Talos mode) cannot drift from
// them: the stand-in's replay tests make the same requests to the stand-in, in process,
// and compare its answers with the recording.
//
// Record boots make talos' Talos (v1.13.9) in QEMU/TCG with user-mode networking: the
// lab factory's schematic initramfs (internal/labfactory, in process), the factory's
// kernel line with talos.events.sink= naming an event sink the recorder runs (Sink).
// Then, with Talos' machinery client:
//
//  1. maintenance: Version, the MachineStatus and the schematic extension over COSI,
//     ApplyConfiguration of bad configs and of an EventSinkConfig alone in every mode,
//     MetaWrite, MetaDelete, Read and Reset as talosctl --insecure (Maintenance);
//  2. install: a control plane's machine config applied as Omni applies it (Install);
//     Talos pulls the factory's installer from its registry, installs to /dev/vda and
//     reboots or kexecs;
//  3. installed: the same reads, config re-applies, META and Read with the cluster's
//     admin certificate over mutual TLS (Installed);
//  4. reset: Omni's reset request (ResetActor), until the machine goes down.
//
// The events Talos sends meanwhile are kept per step (Summarize, NormalizeEvent). The
// recording, JSON (Recording), is DefaultFile; the probes (Maintenance, Installed, …)
// are what the replays call on the stand-in too.
//
// Re-record, from the repository's root, under the VM lock (about 15 minutes):
//
//	make talos
//	flock /tmp/anvil-vm.lock go run ./hack/cmd/talos-record
package talosrecord

// DefaultFile is where the recording is kept, relative to the repository's root: in the
// stand-in's testdata, which its replay tests read.
const DefaultFile = "hack/cmd/talos-standin/testdata/real-talos.json"
