package resources

import (
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/resource/typed"
)

// BMCConfigType is the type of the BMCConfig resource.
const BMCConfigType = resource.Type("BMCConfigs.anvil.dev")

// BMCSecretType is the type of the BMCSecret resource.
const BMCSecretType = resource.Type("BMCSecrets.anvil.dev")

// BMCConfig is how to reach a machine's BMC, keyed by the machine's ID (its UUID), which
// may be set before the machine first boots. Its password lives apart, in the BMCSecret
// of the same ID, which the control API never serves.
type BMCConfig = typed.Resource[BMCConfigSpec, BMCConfigExtension]

// BMC config sources: a person through the control API, or the agent that provisioned
// a user in-band. A user's config is never replaced by the agent's.
const (
	BMCSourceUser  = "user"
	BMCSourceAgent = "agent"
)

// BMCConfigSpec is a BMC's endpoint without its password.
type BMCConfigSpec struct {
	// Kind is the power backend: ipmi, redfish, api or none.
	Kind     string `yaml:"kind" protobuf:"1"`
	Address  string `yaml:"address,omitempty" protobuf:"2"`
	Port     uint32 `yaml:"port,omitempty" protobuf:"3"`
	Username string `yaml:"username,omitempty" protobuf:"4"`
	// Insecure skips TLS verification (Redfish).
	Insecure bool `yaml:"insecure,omitempty" protobuf:"5"`
	// SystemID picks the Redfish System.
	SystemID  string    `yaml:"systemID,omitempty" protobuf:"6"`
	Source    string    `yaml:"source" protobuf:"7"`
	UpdatedAt time.Time `yaml:"updatedAt" protobuf:"8"`
	// HasPassword says a BMCSecret holds a password for it.
	HasPassword bool `yaml:"hasPassword" protobuf:"9"`
}

// NewBMCConfig returns an empty BMCConfig for the machine.
func NewBMCConfig(id resource.ID) *BMCConfig {
	return typed.NewResource[BMCConfigSpec, BMCConfigExtension](
		resource.NewMetadata(NamespaceName, BMCConfigType, id, resource.VersionUndefined),
		BMCConfigSpec{},
	)
}

// BMCConfigExtension provides the resource definition of BMCConfig.
type BMCConfigExtension struct{}

// ResourceDefinition implements typed.Extension.
func (BMCConfigExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             BMCConfigType,
		Aliases:          []resource.Type{"bmc", "bmcs", "bmcconfig", "bmcconfigs"},
		DefaultNamespace: NamespaceName,
		PrintColumns: []meta.PrintColumn{
			{Name: "Kind", JSONPath: "{.kind}"},
			{Name: "Address", JSONPath: "{.address}"},
			{Name: "Port", JSONPath: "{.port}"},
			{Name: "User", JSONPath: "{.username}"},
			{Name: "Source", JSONPath: "{.source}"},
		},
	}
}

// BMCSecret is a BMC's password. The store encrypts it at rest with the rest of the
// state; the control API refuses to read it (control.ReadOnly).
type BMCSecret = typed.Resource[BMCSecretSpec, BMCSecretExtension]

// BMCSecretSpec holds the password.
type BMCSecretSpec struct {
	Password string `yaml:"-" protobuf:"1"`
}

// NewBMCSecret returns an empty BMCSecret for the machine.
func NewBMCSecret(id resource.ID) *BMCSecret {
	return typed.NewResource[BMCSecretSpec, BMCSecretExtension](
		resource.NewMetadata(NamespaceName, BMCSecretType, id, resource.VersionUndefined),
		BMCSecretSpec{},
	)
}

// BMCSecretExtension provides the resource definition of BMCSecret.
type BMCSecretExtension struct{}

// ResourceDefinition implements typed.Extension.
func (BMCSecretExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             BMCSecretType,
		DefaultNamespace: NamespaceName,
		Sensitivity:      meta.Sensitive,
	}
}

// PowerStatusType is the type of the PowerStatus resource.
const PowerStatusType = resource.Type("PowerStatuses.anvil.dev")

// PowerStatus is what the provider observed and did of a machine's power through its
// BMC. PowerController is its only writer.
type PowerStatus = typed.Resource[PowerStatusSpec, PowerStatusExtension]

// PowerStatusSpec is the observed power of one machine.
type PowerStatusSpec struct {
	// Backend and Endpoint say how the machine is reached (no password).
	Backend  string `yaml:"backend" protobuf:"1"`
	Endpoint string `yaml:"endpoint,omitempty" protobuf:"2"`
	// State is the last observed power state: on, off or unknown (unknown too from the
	// moment an action is recorded until the BMC is read again).
	State PowerState `yaml:"state" protobuf:"3"`
	// ObservedAt is when the BMC was read, as last stored: with a read that changed
	// anything else here, else at most every ten minutes (a steady machine costs one
	// write per ten minutes, not one per poll). It may lag the last poll by that much;
	// the poll times themselves are the power controller's, in memory.
	ObservedAt time.Time `yaml:"observedAt,omitempty" protobuf:"4"`
	// Desired is what the provider's policy wants now: on, off, or "" (hands off).
	Desired PowerState `yaml:"desired,omitempty" protobuf:"5"`
	// LastAction is the last power action taken (on, off, pxe+cycle, pxe+on) and when.
	// It is stored before the BMC is asked for it: an action recorded here may not have
	// reached the BMC (the provider stopped in between), and is not taken again within
	// the minimum action interval.
	LastAction   string    `yaml:"lastAction,omitempty" protobuf:"6"`
	LastActionAt time.Time `yaml:"lastActionAt,omitempty" protobuf:"7"`
	// RebootID is the reboot request carried out last: served once recorded, never again.
	RebootID string `yaml:"rebootID,omitempty" protobuf:"8"`
	// Error is why the BMC could not be read or driven, "" when it could.
	Error     string `yaml:"error,omitempty" protobuf:"9"`
	Failures  uint32 `yaml:"failures,omitempty" protobuf:"10"`
	Condition string `yaml:"condition,omitempty" protobuf:"11"` // ok, unreachable, unauthorized, unsupported, manual, error
	// HandoffRebootID is the fallback reboot of a failed kexec handoff carried out last;
	// LastActionReason says why the last action was taken, when the reason is not the
	// obvious one (a kexec fallback).
	HandoffRebootID  string `yaml:"handoffRebootID,omitempty" protobuf:"12"`
	LastActionReason string `yaml:"lastActionReason,omitempty" protobuf:"13"`
}

// NewPowerStatus returns an empty PowerStatus for the machine.
func NewPowerStatus(id resource.ID) *PowerStatus {
	return typed.NewResource[PowerStatusSpec, PowerStatusExtension](
		resource.NewMetadata(NamespaceName, PowerStatusType, id, resource.VersionUndefined),
		PowerStatusSpec{State: PowerUnknown},
	)
}

// PowerStatusExtension provides the resource definition of PowerStatus.
type PowerStatusExtension struct{}

// ResourceDefinition implements typed.Extension.
func (PowerStatusExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             PowerStatusType,
		Aliases:          []resource.Type{"power", "powerstatus", "powerstatuses"},
		DefaultNamespace: NamespaceName,
		PrintColumns: []meta.PrintColumn{
			{Name: "Backend", JSONPath: "{.backend}"},
			{Name: "State", JSONPath: "{.state}"},
			{Name: "Desired", JSONPath: "{.desired}"},
			{Name: "Condition", JSONPath: "{.condition}"},
			{Name: "Last action", JSONPath: "{.lastAction}"},
		},
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[BMCConfigSpec](BMCConfigType, &BMCConfig{}))
	mustRegister(protobuf.RegisterDynamic[BMCSecretSpec](BMCSecretType, &BMCSecret{}))
	mustRegister(protobuf.RegisterDynamic[PowerStatusSpec](PowerStatusType, &PowerStatus{}))
}
