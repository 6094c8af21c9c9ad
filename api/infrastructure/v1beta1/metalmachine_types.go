package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetalMachineFinalizer keeps a MetalMachine until its server is released.
const MetalMachineFinalizer = "anvil.dev/metalmachine"

// ProviderIDPrefix starts every providerID the manager sets: anvil://<machine ID>.
const ProviderIDPrefix = "anvil://"

// MetalMachine condition types, beside Ready and Paused.
const (
	// ServerClaimedCondition is true once a server is claimed for the machine.
	ServerClaimedCondition = "ServerClaimed"
	// ServerProvisionedCondition is true once Talos reports installed on the server.
	ServerProvisionedCondition = "ServerProvisioned"
)

// MetalMachine condition reasons.
const (
	WaitingForClusterInfrastructureReason = "WaitingForClusterInfrastructure"
	WaitingForBootstrapDataReason         = "WaitingForBootstrapData"
	NoServerAvailableReason               = "NoServerAvailable"
	ServerNotFoundReason                  = "ServerNotFound"
	ServerUnavailableReason               = "ServerUnavailable"
	ServerClaimedReason                   = "Claimed"
	ProvisioningReason                    = "Provisioning"
	ProvisionedReason                     = "Provisioned"
	BootstrapDataOutdatedReason           = "BootstrapDataOutdated"
	// AnvilManagedReason: the Anvil provider is managed by Omni, which decides
	// allocations: the manager claims nothing from it.
	AnvilManagedReason = "AnvilManagedByOmni"
	// AnvilUnreachableReason: the manager cannot reach Anvil's control API.
	AnvilUnreachableReason = "AnvilUnreachable"
	// AnvilRefusedReason: Anvil refused a request as malformed (see the message).
	AnvilRefusedReason = "AnvilRefused"
	// InvalidSpecReason: the MetalMachine asks what cannot be done (a bad selector, a
	// BMC credentials Secret that is missing); the message says which.
	InvalidSpecReason = "InvalidSpec"
	// ServerReleasedReason: the server was released behind the manager's back (anvilctl
	// machine deallocate): the MetalMachine has lost it for good; delete its Machine
	// (or let a MachineHealthCheck remediate it) to get another.
	ServerReleasedReason = "ServerReleased"
	PausedReason         = "Paused"
	NotPausedReason      = "NotPaused"
	DeletingReason       = "Deleting"
)

// ServerReference names a Server: its name is the machine's ID in Anvil (its SMBIOS UUID).
type ServerReference struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// BMC is how to reach a server's BMC, when Anvil should use other details than it has
// (given to Anvil when the server is claimed; Anvil keeps the password encrypted).
type BMC struct {
	// Kind is ipmi, redfish, or api (Anvil's HTTP power API: a power controller of the
	// site's own that Anvil calls).
	// +kubebuilder:validation:Enum=ipmi;redfish;api
	Kind string `json:"kind"`

	// Address is the BMC's host or IP address (api: its base URL).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Address string `json:"address"`

	// Port is the BMC's port (ipmi: 623, redfish: 443 when unset).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// CredentialsSecretName names a Secret in the MetalMachine's namespace holding
	// "username" and "password" (api: may be empty).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecretName string `json:"credentialsSecretName"`

	// Insecure skips verifying the Redfish service's TLS certificate.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// MetalMachineSpec is what the user asks of one machine. Exactly one of serverRef and
// serverSelector may be set; with neither, any free server will do.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.serverRef) && has(self.serverSelector))",message="serverRef and serverSelector are exclusive"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.providerID) || (has(self.providerID) && self.providerID == oldSelf.providerID)",message="providerID is immutable once set"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.serverRef) == has(self.serverRef) && (!has(self.serverRef) || self.serverRef == oldSelf.serverRef)",message="serverRef is immutable"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.serverSelector) == has(self.serverSelector) && (!has(self.serverSelector) || self.serverSelector == oldSelf.serverSelector)",message="serverSelector is immutable"
type MetalMachineSpec struct {
	// ProviderID is anvil://<machine ID>, set by the manager once it claimed a server;
	// the manager also gives it to the kubelet (its provider-id argument) so that the
	// Node carries it.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// ServerRef claims one server by name (its machine ID).
	// +optional
	ServerRef *ServerReference `json:"serverRef,omitempty"`

	// ServerSelector claims a free server whose labels (Anvil's: inventory-derived
	// anvil.dev/… and the user's own) it matches.
	// +optional
	ServerSelector *metav1.LabelSelector `json:"serverSelector,omitempty"`

	// TalosVersion is the Talos the server boots and installs (v1.8.0 or later); unset:
	// the manager's --talos-version.
	// +optional
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`
	TalosVersion string `json:"talosVersion,omitempty"`

	// Extensions are official Talos system extensions to add (siderolabs/intel-ucode),
	// beside those the server's hardware calls for.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	Extensions []string `json:"extensions,omitempty"`

	// KernelArgs are extra kernel arguments, one per entry.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=512
	KernelArgs []string `json:"kernelArgs,omitempty"`

	// InstallDisk selects the disk Talos installs to among the server's disks (a disk
	// selector: type=nvme,size>=400GB,pick=smallest); unset: the provider's
	// --install-disk, else the bootstrap config's. A server on which it resolves to no
	// disk, or to several, is not claimed: the next matching server is tried.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	InstallDisk string `json:"installDisk,omitempty"`

	// BMC overrides how Anvil reaches the server's BMC.
	// +optional
	BMC *BMC `json:"bmc,omitempty"`
}

// MetalMachineInitializationStatus is the contract's initialization report.
type MetalMachineInitializationStatus struct {
	// Provisioned is true once Talos is installed on the server.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// MetalMachineStatus is what the manager observed.
type MetalMachineStatus struct {
	// Ready is the v1beta1 contract's form of initialization.provisioned.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// Initialization is the v1beta2 contract's report.
	// +optional
	Initialization MetalMachineInitializationStatus `json:"initialization,omitempty,omitzero"`

	// ServerName is the Server claimed (the machine's ID in Anvil).
	// +optional
	ServerName string `json:"serverName,omitempty"`

	// AllocationID is Anvil's allocation of the server to this machine.
	// +optional
	AllocationID string `json:"allocationID,omitempty"`

	// BootstrapDataHash is the SHA-256 of the machine configuration given to Anvil.
	// +optional
	BootstrapDataHash string `json:"bootstrapDataHash,omitempty"`

	// BMCApplied names the spec.bmc given to Anvil: a hash of its fields and of its
	// credentials Secret's UID and resourceVersion (never of the credentials).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BMCApplied string `json:"bmcApplied,omitempty"`

	// Addresses are the server's, as Anvil saw it boot.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Addresses []MachineAddress `json:"addresses,omitempty"`

	// FailureReason is set, for the v1beta1 contract, only on an error no retry fixes.
	// +optional
	FailureReason *string `json:"failureReason,omitempty"`

	// FailureMessage says more of FailureReason.
	// +optional
	FailureMessage *string `json:"failureMessage,omitempty"`

	// Conditions: Ready, ServerClaimed, ServerProvisioned, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MetalMachine is one Cluster API machine on a server Anvil provisions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=metalmachines,scope=Namespaced,categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta1=v1beta1"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1beta1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Server",type="string",JSONPath=".status.serverName"
// +kubebuilder:printcolumn:name="ProviderID",type="string",JSONPath=".spec.providerID"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type MetalMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MetalMachineSpec   `json:"spec,omitempty"`
	Status MetalMachineStatus `json:"status,omitempty"`
}

// MetalMachineList is a list of MetalMachines.
//
// +kubebuilder:object:root=true
type MetalMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []MetalMachine `json:"items"`
}

// MetalMachineTemplateResource is the part of a MetalMachine a template stamps out.
type MetalMachineTemplateResource struct {
	// ObjectMeta is the labels and annotations the machines get.
	// +optional
	ObjectMeta TemplateObjectMeta `json:"metadata,omitempty,omitzero"`

	Spec MetalMachineSpec `json:"spec"`
}

// TemplateObjectMeta is the metadata a template gives the objects it makes.
type TemplateObjectMeta struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// MetalMachineTemplateSpec is the template.
type MetalMachineTemplateSpec struct {
	Template MetalMachineTemplateResource `json:"template"`
}

// MetalMachineTemplate is what a MachineDeployment or a control plane makes its
// MetalMachines from. It is immutable, as the contract asks: a change is a new template.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=metalmachinetemplates,scope=Namespaced,categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta1=v1beta1"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1beta1"
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="a MetalMachineTemplate's spec is immutable: make a new template"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type MetalMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MetalMachineTemplateSpec `json:"spec,omitempty"`
}

// MetalMachineTemplateList is a list of MetalMachineTemplates.
//
// +kubebuilder:object:root=true
type MetalMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []MetalMachineTemplate `json:"items"`
}
