package resources

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/resource/typed"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
)

// MachineIntentType is the type of the MachineIntent resource.
const MachineIntentType = resource.Type("MachineIntents.anvil.dev")

// MachineIntent is what was asked of a machine: acceptance, allocation, power, wipe,
// reboot, cordon, the user's labels. Package transitions is its only writer: the control
// API, auto-accept (and Omni sync) all go through it.
// A machine without one is pending.
type MachineIntent = typed.Resource[MachineIntentSpec, MachineIntentExtension]

// Acceptance is a machine's acceptance state.
type Acceptance string

// Acceptance states.
const (
	AcceptancePending  Acceptance = "pending"
	AcceptanceAccepted Acceptance = "accepted"
	AcceptanceRejected Acceptance = "rejected"
)

// PowerState is a desired or observed power state.
type PowerState string

// Power states. PowerDefault leaves the choice to the provider's policy.
const (
	PowerDefault PowerState = "default"
	PowerOn      PowerState = "on"
	PowerOff     PowerState = "off"
	PowerUnknown PowerState = "unknown"
)

// Wipe modes, as flags and machines name them.
const (
	WipeModeFast        = "fast"
	WipeModeZeroes      = "zeroes"
	WipeModeSecureErase = "secure-erase"
)

// WipeModes lists the wipe modes.
var WipeModes = []string{WipeModeFast, WipeModeZeroes, WipeModeSecureErase}

// Wipe scopes: which of a machine's disks a wipe touches.
const (
	// WipeScopeAll wipes every disk a wipe may touch.
	WipeScopeAll = "all"
	// WipeScopeInstallDisk wipes the install disk alone (the one the machine's last
	// allocation installed to, else the provider's --install-disk).
	WipeScopeInstallDisk = "install-disk"
	// WipeScopeAllExcept keeps the disks a selector matches (data disks).
	WipeScopeAllExcept = "all-except"
)

// WipeScopes lists the wipe scopes.
var WipeScopes = []string{WipeScopeAll, WipeScopeInstallDisk, WipeScopeAllExcept}

// MachineIntentSpec is the desired state of a machine.
type MachineIntentSpec struct {
	Acceptance Acceptance  `yaml:"acceptance" protobuf:"1"`
	Allocation *Allocation `yaml:"allocation,omitempty" protobuf:"2"`
	Power      PowerState  `yaml:"power,omitempty" protobuf:"3"`
	// WipeID names the wipe owed: when it differs from the observed wiped ID, the
	// machine must be wiped before it is handed out again.
	WipeID string `yaml:"wipeID,omitempty" protobuf:"4"`
	// RebootID asks for a reboot each time it changes.
	RebootID string `yaml:"rebootID,omitempty" protobuf:"5"`
	// Cordoned machines are not handed out.
	Cordoned bool `yaml:"cordoned,omitempty" protobuf:"6"`
	// Labels are the user's own labels on the machine (the SetLabels transition); never
	// under the reserved LabelPrefix.
	Labels map[string]string `yaml:"labels,omitempty" protobuf:"7"`
	// WipeMode is this machine's wipe mode (fast, zeroes, secure-erase); "" follows the
	// provider's --wipe-mode.
	WipeMode string `yaml:"wipeMode,omitempty" protobuf:"8"`
	// IdlePower is the power of the machine while it has nothing to do (on or off),
	// when its owner decides it (Omni's preferred power state); "" follows the
	// provider's --power-idle-default. Power, when on or off, overrides it.
	IdlePower PowerState `yaml:"idlePower,omitempty" protobuf:"9"`
	// Kexec is this machine's kexec handoff mode (auto, always, never); "" follows the
	// provider's --kexec.
	Kexec string `yaml:"kexec,omitempty" protobuf:"10"`
	// Held is why the provider holds the machine after a security event (its config
	// token used from a second address, an identity that does not match): it is not
	// handed out, and its allocation is not recorded installed, until an operator
	// uncordons it. "" when not held.
	Held string `yaml:"held,omitempty" protobuf:"11"`
	// BoundEK is the fingerprint of the TPM endorsement key bound to the machine at its
	// acceptance (the EK its agent proved at its first registration, or the one a person
	// gave to accept it with): every later session of its agent must prove that EK.
	// "" when it was accepted without a TPM identity.
	BoundEK string `yaml:"boundEK,omitempty" protobuf:"12"`
	// WipeScope is which of this machine's disks its wipes touch (WipeScopes); "" follows
	// the provider's --wipe-scope. WipeKeep is the selector of the disks all-except keeps.
	WipeScope string `yaml:"wipeScope,omitempty" protobuf:"13"`
	WipeKeep  string `yaml:"wipeKeep,omitempty" protobuf:"14"`
	// InstallDisk is the disk the machine's last allocation installed to, by its stable
	// identity (a selector: serial=… or wwid=…); kept after the allocation ends, so that
	// the install-disk wipe scope knows which disk that is.
	InstallDisk string `yaml:"installDisk,omitempty" protobuf:"15"`
}

// Kexec handoff modes: auto kexecs unless the machine's hardware is on the deny list.
const (
	KexecAuto   = "auto"
	KexecAlways = "always"
	KexecNever  = "never"
)

// KexecModes are the kexec handoff modes.
var KexecModes = []string{KexecAuto, KexecAlways, KexecNever}

// Allocation is what a machine is handed to: a Talos version and the schematic it boots.
type Allocation struct {
	// ID names this allocation: the metadata token is bound to it, and "installed" is
	// recorded against it.
	ID           string   `yaml:"id" protobuf:"1"`
	TalosVersion string   `yaml:"talosVersion" protobuf:"2"`
	SchematicID  string   `yaml:"schematicID,omitempty" protobuf:"3"`
	Extensions   []string `yaml:"extensions,omitempty" protobuf:"4"`
	KernelArgs   []string `yaml:"kernelArgs,omitempty" protobuf:"5"`
	// Config is the Talos machine configuration served by the metadata server.
	Config      string    `yaml:"config,omitempty" protobuf:"6"`
	AllocatedAt time.Time `yaml:"allocatedAt" protobuf:"7"`
	// DetectedExtensions are those of Extensions the machine's hardware called for (the
	// extensions catalog) rather than the request.
	DetectedExtensions []string `yaml:"detectedExtensions,omitempty" protobuf:"8"`
	// Owner names who claimed the machine (the Cluster API manager names its
	// MetalMachine); empty when a person allocated it. Allocating again for the same
	// owner keeps the allocation.
	Owner string `yaml:"owner,omitempty" protobuf:"9"`
	// InstallDisk is the disk Talos installs to, resolved from a selector against the
	// machine's inventory when it was allocated; nil leaves it to the config.
	InstallDisk *InstallDisk `yaml:"installDisk,omitempty" protobuf:"10"`
}

// InstallDisk is an install disk chosen from the inventory.
type InstallDisk struct {
	// Selector is what was asked (disksel's language).
	Selector string `yaml:"selector" protobuf:"1"`
	// Identity names the disk it resolved to stably (serial=… or wwid=…): the served
	// config's diskSelector.
	Identity string `yaml:"identity" protobuf:"2"`
	// Disk describes it as the agent saw it (name, size, model), for people.
	Disk string `yaml:"disk" protobuf:"3"`
}

// NewMachineIntent returns a pending MachineIntent for the machine.
func NewMachineIntent(id resource.ID) *MachineIntent {
	return typed.NewResource[MachineIntentSpec, MachineIntentExtension](
		resource.NewMetadata(NamespaceName, MachineIntentType, id, resource.VersionUndefined),
		MachineIntentSpec{Acceptance: AcceptancePending, Power: PowerDefault},
	)
}

// MachineIntentExtension provides the resource definition of MachineIntent.
type MachineIntentExtension struct{}

// ResourceDefinition implements typed.Extension.
func (MachineIntentExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             MachineIntentType,
		Aliases:          []resource.Type{"machineintent", "machineintents", "intent", "intents"},
		DefaultNamespace: NamespaceName,
		Sensitivity:      meta.Sensitive, // the allocation carries the machine config
		PrintColumns: []meta.PrintColumn{
			{Name: "Acceptance", JSONPath: "{.acceptance}"},
			{Name: "Talos", JSONPath: "{.allocation.talosVersion}"},
			{Name: "Power", JSONPath: "{.power}"},
			{Name: "Cordoned", JSONPath: "{.cordoned}"},
		},
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[MachineIntentSpec](MachineIntentType, &MachineIntent{}))
}

// MachineHeldBy returns the ID of the machine allocated to owner, "" when none is: how
// the transitions keep an owner to one machine, and how a claimant that lost track of its
// claim finds it.
func MachineHeldBy(ctx context.Context, st state.State, owner string) (resource.ID, error) {
	intents, err := safe.StateListAll[*MachineIntent](ctx, st)
	if err != nil {
		return "", fmt.Errorf("error listing machine intents: %w", err)
	}

	for intent := range intents.All() {
		if a := intent.TypedSpec().Allocation; a != nil && a.Owner == owner {
			return intent.Metadata().ID(), nil
		}
	}

	return "", nil
}
