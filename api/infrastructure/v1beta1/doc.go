// Package v1beta1 is the Kubernetes API of Anvil's Cluster API infrastructure provider
// (group infrastructure.cluster.x-k8s.io): MetalCluster, MetalMachine and
// MetalMachineTemplate, which Cluster API's core controllers drive, and Server, the
// read-only mirror of a machine Anvil has accepted, which MetalMachines select.
//
// The types follow Cluster API's v1beta2 contract for infrastructure providers
// (status.initialization.provisioned, conditions as metav1.Condition) and keep the
// v1beta1 contract's fields beside it (status.ready, failureReason, failureMessage).
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.cluster.x-k8s.io
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta1"}

	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&MetalCluster{}, &MetalClusterList{},
		&MetalMachine{}, &MetalMachineList{}, &MetalMachineTemplate{}, &MetalMachineTemplateList{},
		&Server{}, &ServerList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)

	return nil
}

// Condition types and reasons shared by the kinds.
const (
	// ReadyCondition is true when the object is what Cluster API asked for.
	ReadyCondition = "Ready"

	// PausedCondition mirrors Cluster API's: true while the cluster or the object is
	// paused and the manager leaves it alone.
	PausedCondition = "Paused"
)

// APIEndpoint is where a cluster's control plane answers.
type APIEndpoint struct {
	// Host is a DNS name or IP address.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Host string `json:"host,omitempty"`

	// Port is a TCP port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// IsZero says whether the endpoint is unset.
func (e APIEndpoint) IsZero() bool { return e.Host == "" && e.Port == 0 }

// MachineAddressType is the kind of a machine's address, as Cluster API names them.
// +kubebuilder:validation:Enum=Hostname;ExternalIP;InternalIP;ExternalDNS;InternalDNS
type MachineAddressType string

// Address types.
const (
	MachineHostName    MachineAddressType = "Hostname"
	MachineInternalIP  MachineAddressType = "InternalIP"
	MachineExternalIP  MachineAddressType = "ExternalIP"
	MachineInternalDNS MachineAddressType = "InternalDNS"
)

// MachineAddress is one address of a machine.
type MachineAddress struct {
	Type MachineAddressType `json:"type"`

	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Address string `json:"address"`
}
