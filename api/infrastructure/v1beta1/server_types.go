package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServerState is where a server stands in Anvil's lifecycle, as MetalMachines see it.
// +kubebuilder:validation:Enum=Preparing;Available;Allocated;Installed
type ServerState string

// Server states.
const (
	// ServerPreparing: accepted, a wipe or BMC provisioning still owed.
	ServerPreparing ServerState = "Preparing"
	// ServerAvailable: accepted, nothing owed, not allocated.
	ServerAvailable ServerState = "Available"
	// ServerAllocated: handed to Talos, not installed yet.
	ServerAllocated ServerState = "Allocated"
	// ServerInstalled: Talos is installed for the current allocation.
	ServerInstalled ServerState = "Installed"
)

// ServerAllocation is who holds a server.
type ServerAllocation struct {
	// ID is Anvil's allocation ID.
	ID string `json:"id"`
	// Owner is the claimant (capi/<namespace>/<name> for a MetalMachine); empty
	// when a person allocated it.
	// +optional
	Owner string `json:"owner,omitempty"`
	// TalosVersion is the Talos it boots.
	TalosVersion string `json:"talosVersion"`
	// Installed is true once Talos reported installed for this allocation.
	// +optional
	Installed bool `json:"installed,omitempty"`
	// AllocatedAt is when it was allocated.
	// +optional
	AllocatedAt *metav1.Time `json:"allocatedAt,omitempty"`
}

// ServerHardware is a summary of what the agent found.
type ServerHardware struct {
	// +optional
	Manufacturer string `json:"manufacturer,omitempty"`
	// +optional
	Product string `json:"product,omitempty"`
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
	// +optional
	Architecture string `json:"architecture,omitempty"`
	// Sockets, Cores and Threads count the processors.
	// +optional
	Sockets int32 `json:"sockets,omitempty"`
	// +optional
	Cores int32 `json:"cores,omitempty"`
	// +optional
	Threads int32 `json:"threads,omitempty"`
	// +optional
	CPUModel string `json:"cpuModel,omitempty"`
	// MemoryMiB is the installed memory.
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=256
	Disks []ServerDisk `json:"disks,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=64
	NICs []ServerNIC `json:"nics,omitempty"`
}

// ServerDisk is one disk.
type ServerDisk struct {
	Name string `json:"name"`
	// SizeBytes is the disk's size.
	SizeBytes int64 `json:"sizeBytes"`
	// +optional
	Model string `json:"model,omitempty"`
	// +optional
	Serial string `json:"serial,omitempty"`
	// +optional
	Transport string `json:"transport,omitempty"`
	// +optional
	Rotational bool `json:"rotational,omitempty"`
}

// ServerNIC is one network interface.
type ServerNIC struct {
	// +optional
	Name string `json:"name,omitempty"`
	MAC  string `json:"mac"`
	// +optional
	Driver string `json:"driver,omitempty"`
}

// ServerStatus is the server as Anvil has it. The manager is its only writer.
type ServerStatus struct {
	// UUID is the machine's SMBIOS UUID (its ID in Anvil).
	UUID string `json:"uuid"`
	// State is where it stands.
	// +optional
	State ServerState `json:"state,omitempty"`
	// Cordoned servers are not handed out.
	// +optional
	Cordoned bool `json:"cordoned,omitempty"`
	// Power is the power state its BMC last reported (on, off, unknown).
	// +optional
	Power string `json:"power,omitempty"`
	// BMC says how Anvil reaches its BMC (never a password).
	// +optional
	BMC string `json:"bmc,omitempty"`
	// Allocation is who holds it, when allocated.
	// +optional
	Allocation *ServerAllocation `json:"allocation,omitempty"`
	// Hardware is what its agent reported.
	// +optional
	Hardware ServerHardware `json:"hardware,omitempty,omitzero"`
	// Addresses are those Anvil saw it boot from.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Addresses []MachineAddress `json:"addresses,omitempty"`
}

// Server is a machine Anvil has accepted, mirrored read-only from Anvil's inventory by
// the manager so that MetalMachines can select it (its labels are the machine's labels
// in Anvil). Changes made to it here are overwritten: Anvil's control API and anvilctl
// change machines.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=servers,scope=Cluster,categories=anvil
// +kubebuilder:printcolumn:name="State",type="string",JSONPath=".status.state"
// +kubebuilder:printcolumn:name="Owner",type="string",JSONPath=".status.allocation.owner"
// +kubebuilder:printcolumn:name="Product",type="string",JSONPath=".status.hardware.product",priority=1
// +kubebuilder:printcolumn:name="Cores",type="integer",JSONPath=".status.hardware.cores"
// +kubebuilder:printcolumn:name="MemoryMiB",type="integer",JSONPath=".status.hardware.memoryMiB"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type Server struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status ServerStatus `json:"status,omitempty"`
}

// ServerList is a list of Servers.
//
// +kubebuilder:object:root=true
type ServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Server `json:"items"`
}
