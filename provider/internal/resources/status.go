package resources

import (
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/resource/typed"
)

// MachineStatusType is the type of the MachineStatus resource.
const MachineStatusType = resource.Type("MachineStatuses.anvil.dev")

// MachineStatus is what was observed of a machine beyond its identity: installation,
// wipes, power. MachineStatusController is its only writer.
type MachineStatus = typed.Resource[MachineStatusSpec, MachineStatusExtension]

// MachineStatusSpec is the observed state of a machine.
type MachineStatusSpec struct {
	// InstalledAllocation is the ID of the allocation Talos reported installed under;
	// the machine is installed while it equals the current allocation's ID.
	InstalledAllocation string    `yaml:"installedAllocation,omitempty" protobuf:"1"`
	InstalledAt         time.Time `yaml:"installedAt,omitempty" protobuf:"2"`
	// InstalledBy says where the fact came from: "event-sink" or "manual".
	InstalledBy string `yaml:"installedBy,omitempty" protobuf:"3"`
	// WipedID is the ID of the last wipe completed.
	WipedID string     `yaml:"wipedID,omitempty" protobuf:"4"`
	Power   PowerState `yaml:"power,omitempty" protobuf:"5"`
	// LastWipe is the erase report of the last wipe completed.
	LastWipe *WipeRecord `yaml:"lastWipe,omitempty" protobuf:"6"`
	// BMCOrder is the BMC provisioning order the agent answered (done or failed), so it
	// is not sent again; BMCError is why it failed.
	BMCOrder string `yaml:"bmcOrder,omitempty" protobuf:"7"`
	BMCError string `yaml:"bmcError,omitempty" protobuf:"8"`
	// Handoff is the last kexec handoff into Talos: the agent ordered to kexec rather
	// than the machine rebooted through its firmware.
	Handoff *HandoffRecord `yaml:"handoff,omitempty" protobuf:"9"`
	// KexecBlockers say why this machine's hardware is known to break across a kexec
	// (the deny list matched its inventory); --kexec=auto does not kexec it.
	KexecBlockers []string `yaml:"kexecBlockers,omitempty" protobuf:"10"`
	// AgentKexecUnavailable is why the machine's agent said it cannot kexec ("" when it
	// can): an agent running as a Talos extension (agent-mode Talos), where Talos keeps
	// kexec to itself. No kexec is ordered to it, whatever the kexec mode.
	AgentKexecUnavailable string `yaml:"agentKexecUnavailable,omitempty" protobuf:"11"`
	// ConfigFetch is who fetched the current allocation's configuration with its
	// metadata token: the first fetch binds the token to its address, and only that
	// address is trusted as the allocation's Talos (its install events).
	ConfigFetch *ConfigFetchRecord `yaml:"configFetch,omitempty" protobuf:"12"`
}

// ConfigFetchRecord is the use of one allocation's metadata token.
type ConfigFetchRecord struct {
	AllocationID string `yaml:"allocationID" protobuf:"1"`
	// By is the address the first fetch came from; At when.
	By string    `yaml:"by" protobuf:"2"`
	At time.Time `yaml:"at" protobuf:"3"`
	// Refused counts fetches from other addresses, each a security event; RefusedFrom is
	// the last one's address.
	Refused     uint32 `yaml:"refused,omitempty" protobuf:"4"`
	RefusedFrom string `yaml:"refusedFrom,omitempty" protobuf:"5"`
	// Path is the way the token that first fetched the configuration reached Talos
	// (ConfigPathKexec or ConfigPathBootScript): which path the handoff took.
	Path string `yaml:"path,omitempty" protobuf:"6"`
}

// The paths a metadata token reaches Talos by.
const (
	// ConfigPathKexec: in a kexec order, over the agent's pinned channel.
	ConfigPathKexec = "kexec"
	// ConfigPathBootScript: in a boot script (iPXE, a UKI's cmdline), which any host on
	// the provisioning network can fetch.
	ConfigPathBootScript = "boot-script"
)

// HandoffRecord is one kexec handoff of an allocation into Talos, as it went.
type HandoffRecord struct {
	AllocationID string `yaml:"allocationID" protobuf:"1"`
	// OrderedAt is when the agent was ordered to kexec; LoadedAt when it reported the
	// kernel loaded (it jumps next); ConfirmedAt when Talos was seen up (it fetched its
	// configuration, or reported an event).
	OrderedAt   time.Time `yaml:"orderedAt" protobuf:"2"`
	LoadedAt    time.Time `yaml:"loadedAt,omitempty" protobuf:"3"`
	ConfirmedAt time.Time `yaml:"confirmedAt,omitempty" protobuf:"4"`
	// Failure is why the kexec failed as the agent reported it; the provider then falls
	// back to booting the machine through its firmware.
	Failure string `yaml:"failure,omitempty" protobuf:"5"`
}

// UseConfigToken applies a use of the allocation's metadata token, which reached Talos
// by path, from addr at now, and says whether the configuration may be served to it: the
// first use binds the token to its address, later ones from that address are the same
// Talos asking again, and any other address is refused (counted on the record).
func (s *MachineStatusSpec) UseConfigToken(allocationID, path, addr string, now time.Time) bool {
	switch f := s.ConfigFetch; {
	case f == nil || f.AllocationID != allocationID:
		s.ConfigFetch = &ConfigFetchRecord{AllocationID: allocationID, By: addr, At: now, Path: path}

		return true
	case f.By == addr:
		return true
	default:
		f.Refused++
		f.RefusedFrom = addr

		return false
	}
}

// WipeRecord is what a wipe did, disk by disk, as the agent reported it.
type WipeRecord struct {
	ID    string      `yaml:"id" protobuf:"1"`
	At    time.Time   `yaml:"at" protobuf:"2"`
	Disks []DiskWiped `yaml:"disks,omitempty" protobuf:"3"`
	// In Omni mode, what Omni had of the machine when the wipe completed: its count of
	// install events (Talos is installed again once Omni counts more) and the node
	// unique token the wipe made void (reported back to Omni).
	OmniInstallEvents   uint64 `yaml:"omniInstallEvents,omitempty" protobuf:"4"`
	OmniNodeUniqueToken string `yaml:"omniNodeUniqueToken,omitempty" protobuf:"5"`
}

// DiskWiped is one disk's part of a wipe.
type DiskWiped struct {
	Device     string `yaml:"device" protobuf:"1"`
	Method     string `yaml:"method,omitempty" protobuf:"2"`
	Bytes      uint64 `yaml:"bytes,omitempty" protobuf:"3"`
	DurationMs uint64 `yaml:"durationMs,omitempty" protobuf:"4"`
	Verified   string `yaml:"verified,omitempty" protobuf:"5"`
	Skipped    string `yaml:"skipped,omitempty" protobuf:"6"`
	// Kept says the wipe's scope kept the disk (Skipped says why).
	Kept bool `yaml:"kept,omitempty" protobuf:"7"`
}

// NewMachineStatus returns an empty MachineStatus for the machine.
func NewMachineStatus(id resource.ID) *MachineStatus {
	return typed.NewResource[MachineStatusSpec, MachineStatusExtension](
		resource.NewMetadata(NamespaceName, MachineStatusType, id, resource.VersionUndefined),
		MachineStatusSpec{Power: PowerUnknown},
	)
}

// MachineStatusExtension provides the resource definition of MachineStatus.
type MachineStatusExtension struct{}

// ResourceDefinition implements typed.Extension.
func (MachineStatusExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             MachineStatusType,
		Aliases:          []resource.Type{"machinestatus", "machinestatuses", "ms"},
		DefaultNamespace: NamespaceName,
		PrintColumns: []meta.PrintColumn{
			{Name: "Installed", JSONPath: "{.installedAllocation}"},
			{Name: "Wiped", JSONPath: "{.wipedID}"},
			{Name: "Power", JSONPath: "{.power}"},
		},
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[MachineStatusSpec](MachineStatusType, &MachineStatus{}))
}
