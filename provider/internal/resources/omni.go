package resources

import (
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/resource/typed"
)

// OmniMachineType is the type of the OmniMachine resource.
const OmniMachineType = resource.Type("OmniMachines.anvil.dev")

// OmniMachine is what Omni wants of a machine, in Omni mode: the fields of its
// infra.Machine that decide the machine's desired state (OMNI-CONTRACT.md, section A),
// as the Omni adapter last reported them. The adapter link (package omnilink) is its
// only writer; the Omni intent controller makes it the machine's MachineIntent through
// the transitions. Kept in the state, it is Omni's view beside Anvil's for anvilctl.
type OmniMachine = typed.Resource[OmniMachineSpec, OmniMachineExtension]

// OmniMachineSpec is Omni's infra.Machine, the fields Anvil acts on.
type OmniMachineSpec struct {
	// Acceptance is the admin's decision in Omni (InfraMachineConfig).
	Acceptance Acceptance `yaml:"acceptance" protobuf:"1"`
	// ClusterTalosVersion, non-empty, means the machine is allocated to a cluster that
	// runs this Talos version, with Extensions and ExtraKernelArgs.
	ClusterTalosVersion string   `yaml:"clusterTalosVersion,omitempty" protobuf:"2"`
	Extensions          []string `yaml:"extensions,omitempty" protobuf:"3"`
	ExtraKernelArgs     string   `yaml:"extraKernelArgs,omitempty" protobuf:"4"`
	// PreferredPower is on or off (Omni's preferred_power_state).
	PreferredPower PowerState `yaml:"preferredPower,omitempty" protobuf:"5"`
	// WipeID changes each time Omni deallocates the machine: a new one owes a wipe.
	WipeID string `yaml:"wipeID,omitempty" protobuf:"6"`
	// InstallEventID counts the install events Omni saw over SideroLink.
	InstallEventID uint64 `yaml:"installEventID,omitempty" protobuf:"7"`
	// RequestedRebootID asks for a reboot each time it changes.
	RequestedRebootID string `yaml:"requestedRebootID,omitempty" protobuf:"8"`
	// PowerOffRequestID, non-empty, keeps the machine off whatever its allocation wants.
	PowerOffRequestID string `yaml:"powerOffRequestID,omitempty" protobuf:"9"`
	Cordoned          bool   `yaml:"cordoned,omitempty" protobuf:"10"`
	// NodeUniqueToken is the token the machine's Talos joined Omni with.
	NodeUniqueToken string `yaml:"nodeUniqueToken,omitempty" protobuf:"11"`
	// Gone: Omni no longer has the machine (its infra.Machine was removed). It is
	// pending until Omni has it again.
	Gone bool `yaml:"gone,omitempty" protobuf:"12"`
}

// NewOmniMachine returns an empty OmniMachine for the machine.
func NewOmniMachine(id resource.ID) *OmniMachine {
	return typed.NewResource[OmniMachineSpec, OmniMachineExtension](
		resource.NewMetadata(NamespaceName, OmniMachineType, id, resource.VersionUndefined),
		OmniMachineSpec{Acceptance: AcceptancePending},
	)
}

// OmniMachineExtension provides the resource definition of OmniMachine.
type OmniMachineExtension struct{}

// ResourceDefinition implements typed.Extension.
func (OmniMachineExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             OmniMachineType,
		Aliases:          []resource.Type{"omnimachine", "omnimachines", "omni"},
		DefaultNamespace: NamespaceName,
		// The node unique token lets a machine re-join Omni as itself.
		Sensitivity: meta.Sensitive,
		PrintColumns: []meta.PrintColumn{
			{Name: "Acceptance", JSONPath: "{.acceptance}"},
			{Name: "Talos", JSONPath: "{.clusterTalosVersion}"},
			{Name: "Power", JSONPath: "{.preferredPower}"},
			{Name: "Wipe", JSONPath: "{.wipeID}"},
		},
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[OmniMachineSpec](OmniMachineType, &OmniMachine{}))
}

// OmniMachineStatusType is the type of the OmniMachineStatus resource.
const OmniMachineStatusType = resource.Type("OmniMachineStatuses.anvil.dev")

// OmniMachineStatus is what the provider reports to Omni of a machine Omni has: the
// fields of its infra.MachineStatus (OMNI-CONTRACT.md, section A), which the Omni
// adapter writes. OmniMachineStatusController is its only writer.
type OmniMachineStatus = typed.Resource[OmniMachineStatusSpec, OmniMachineStatusExtension]

// OmniMachineStatusSpec is a machine's infra.MachineStatus, as Anvil computes it.
type OmniMachineStatusSpec struct {
	// Power is the power state its BMC last reported: on, off or unknown.
	Power PowerState `yaml:"power" protobuf:"1"`
	// ReadyToUse: accepted, no wipe owed, no BMC provisioning owed, not held by a local allocation.
	ReadyToUse bool `yaml:"readyToUse" protobuf:"2"`
	// Installed: Talos is installed for its allocation.
	Installed bool `yaml:"installed" protobuf:"3"`
	// LastRebootID is Omni's reboot request carried out last, at LastRebootAt.
	LastRebootID string    `yaml:"lastRebootID,omitempty" protobuf:"4"`
	LastRebootAt time.Time `yaml:"lastRebootAt,omitempty" protobuf:"5"`
	// LastPowerOffID is Omni's power-off request carried out (the machine is off).
	LastPowerOffID string `yaml:"lastPowerOffID,omitempty" protobuf:"6"`
	// WipedNodeUniqueToken is the node unique token the last wipe made void.
	WipedNodeUniqueToken string `yaml:"wipedNodeUniqueToken,omitempty" protobuf:"7"`
	// Labels are the machine's effective labels (static, derived, the user's): Omni
	// shows them as omni.sidero.dev/infra-provider/<id>/<key>.
	Labels map[string]string `yaml:"labels,omitempty" protobuf:"8"`
}

// NewOmniMachineStatus returns an empty OmniMachineStatus for the machine.
func NewOmniMachineStatus(id resource.ID) *OmniMachineStatus {
	return typed.NewResource[OmniMachineStatusSpec, OmniMachineStatusExtension](
		resource.NewMetadata(NamespaceName, OmniMachineStatusType, id, resource.VersionUndefined),
		OmniMachineStatusSpec{Power: PowerUnknown},
	)
}

// OmniMachineStatusExtension provides the resource definition of OmniMachineStatus.
type OmniMachineStatusExtension struct{}

// ResourceDefinition implements typed.Extension.
func (OmniMachineStatusExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             OmniMachineStatusType,
		Aliases:          []resource.Type{"omnimachinestatus", "omnimachinestatuses", "omnistatus"},
		DefaultNamespace: NamespaceName,
		// The wiped node unique token was a machine's credential in Omni.
		Sensitivity: meta.Sensitive,
		PrintColumns: []meta.PrintColumn{
			{Name: "Power", JSONPath: "{.power}"},
			{Name: "Ready", JSONPath: "{.readyToUse}"},
			{Name: "Installed", JSONPath: "{.installed}"},
		},
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[OmniMachineStatusSpec](OmniMachineStatusType, &OmniMachineStatus{}))
}

// OmniJoinType is the type of the OmniJoin resource.
const OmniJoinType = resource.Type("OmniJoins.anvil.dev")

// OmniJoinID is the one OmniJoin's ID.
const OmniJoinID = "omni"

// OmniJoin is Omni's join config as the leader's Omni adapter last said it, for every
// replica of a site: the kernel args that make agents and Talos join Omni over
// SideroLink, and the join config documents Talos is served. On one provider (the
// embedded store) the link keeps it in memory and this resource is not written.
type OmniJoin = typed.Resource[OmniJoinSpec, OmniJoinExtension]

// OmniJoinSpec is Omni's join config.
type OmniJoinSpec struct {
	KernelArgs []string `yaml:"kernelArgs,omitempty" protobuf:"1"`
	// Config is the join config documents (Talos machine configuration).
	Config string `yaml:"config,omitempty" protobuf:"2"`
}

// NewOmniJoin returns the empty OmniJoin.
func NewOmniJoin() *OmniJoin {
	return typed.NewResource[OmniJoinSpec, OmniJoinExtension](
		resource.NewMetadata(NamespaceName, OmniJoinType, OmniJoinID, resource.VersionUndefined),
		OmniJoinSpec{},
	)
}

// OmniJoinExtension provides the resource definition of OmniJoin.
type OmniJoinExtension struct{}

// ResourceDefinition implements typed.Extension.
func (OmniJoinExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             OmniJoinType,
		Aliases:          []resource.Type{"omnijoin", "omnijoins"},
		DefaultNamespace: NamespaceName,
		// The join token lets a machine join Omni.
		Sensitivity: meta.Sensitive,
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[OmniJoinSpec](OmniJoinType, &OmniJoin{}))
}
