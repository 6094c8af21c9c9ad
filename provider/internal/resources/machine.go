package resources

import (
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/resource/typed"
)

// MachineType is the type of the Machine resource.
const MachineType = resource.Type("Machines.anvil.dev")

// Machine is what the provider knows of a machine's identity, from its PXE boots.
//
// Its ID is the machine's identifier (SMBIOS UUID, see DESIGN.md); MachineController is
// its only writer.
type Machine = typed.Resource[MachineSpec, MachineExtension]

// MachineSpec describes a machine as its firmware presented it.
type MachineSpec struct {
	// UUID as the firmware reported it (lower case).
	UUID string `yaml:"uuid" protobuf:"1"`
	// MACs seen booting, the most recent first.
	MACs []string `yaml:"macs,omitempty" protobuf:"2"`
	// Arch is the CPU architecture: amd64 or arm64.
	Arch string `yaml:"arch,omitempty" protobuf:"3"`
	// Firmware is bios or uefi.
	Firmware string `yaml:"firmware,omitempty" protobuf:"4"`
	// FirstSeen is when the machine first asked for a boot script.
	FirstSeen time.Time `yaml:"firstSeen" protobuf:"5"`
	// LastPXE is when the machine last asked for a boot script (kept to five minutes, so a
	// fleet booting in a loop does not turn into disk writes).
	LastPXE time.Time `yaml:"lastPXE" protobuf:"6"`
	// LastAddress is the IP address the last boot script was fetched from.
	LastAddress string `yaml:"lastAddress,omitempty" protobuf:"7"`
	// LastDecision is what the provider served on the last boot.
	LastDecision string `yaml:"lastDecision,omitempty" protobuf:"8"`
	// AgentBootIssued is when the newest agent boot token was issued: older tokens are
	// superseded.
	AgentBootIssued time.Time `yaml:"agentBootIssued,omitempty" protobuf:"9"`
	// EK is the fingerprint (sha256:<hex> of the PKIX DER) of the TPM endorsement key the
	// machine's agent proved it holds (credential activation) at its first registration
	// with a TPM; "" while no agent of it has shown one. It is never replaced: another EK
	// presented for the machine later is refused as a security event. Acceptance binds
	// it (MachineIntent's BoundEK).
	EK string `yaml:"ek,omitempty" protobuf:"10"`
	// EKRecordedAt is when EK was recorded.
	EKRecordedAt time.Time `yaml:"ekRecordedAt,omitempty" protobuf:"11"`
	// AgentRegistered is when an agent of the machine first said hello with a valid
	// token. A machine that never registered only asked for a boot script, as anyone may
	// for a made-up UUID: while pending, such machines are bounded in number and
	// forgotten when not seen for a while (controllers.MachineController).
	AgentRegistered time.Time `yaml:"agentRegistered,omitempty" protobuf:"12"`
}

// NewMachine returns an empty Machine resource with the given ID.
func NewMachine(id resource.ID) *Machine {
	return typed.NewResource[MachineSpec, MachineExtension](
		resource.NewMetadata(NamespaceName, MachineType, id, resource.VersionUndefined),
		MachineSpec{},
	)
}

// MachineExtension provides the resource definition of Machine.
type MachineExtension struct{}

// ResourceDefinition implements typed.Extension.
func (MachineExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             MachineType,
		Aliases:          []resource.Type{"machine", "machines", "m"},
		DefaultNamespace: NamespaceName,
		PrintColumns: []meta.PrintColumn{
			{Name: "Arch", JSONPath: "{.arch}"},
			{Name: "Firmware", JSONPath: "{.firmware}"},
			{Name: "Address", JSONPath: "{.lastAddress}"},
			{Name: "Last Boot", JSONPath: "{.lastDecision}"},
		},
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[MachineSpec](MachineType, &Machine{}))
}
