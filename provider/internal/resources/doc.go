// Package resources holds the provider's resource types and the store they live in.
//
// Resources follow the Talos model: a typed spec (a plain struct with protobuf tags),
// a resource definition that names the type, its aliases and the columns a CLI prints,
// and one writer per resource. The store is COSI's in-memory state backed by BoltDB for
// the persistent namespace, with every stored resource encrypted at rest.
package resources

// The specs' deep copies (typed.DeepCopyable) are generated, as Talos generates its own.
//go:generate deep-copy -type BMCConfigSpec -type BMCSecretSpec -type DHCPLeaseSpec -type MachineIntentSpec -type MachineInventorySpec -type MachineLabelsSpec -type MachineSpec -type MachineStatusSpec -type OmniMachineSpec -type OmniMachineStatusSpec -type OmniJoinSpec -type PowerStatusSpec -type SchematicSpec -o deep_copy.generated.go .

import "github.com/cosi-project/runtime/pkg/resource"

// Namespaces of the provider's state.
const (
	// NamespaceName is the persistent namespace: machines, what people asked of them, what
	// was observed, DHCP leases. It is backed by BoltDB and survives restarts.
	NamespaceName resource.Namespace = "metal"

	// RuntimeNamespaceName holds what only matters while the provider runs.
	RuntimeNamespaceName resource.Namespace = "metal-runtime"
)
