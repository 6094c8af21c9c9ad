package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetalClusterSpec is what the user asks of a cluster's infrastructure: on bare metal,
// only where its control plane answers (a load-balanced or floating address that the
// control-plane machines carry; Anvil does not provide one).
type MetalClusterSpec struct {
	// ControlPlaneEndpoint is the endpoint of the cluster's API server, copied to
	// Cluster API's Cluster as the contract says.
	// +optional
	ControlPlaneEndpoint APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`
}

// MetalClusterInitializationStatus is the contract's initialization report.
type MetalClusterInitializationStatus struct {
	// Provisioned is true once the cluster's infrastructure is ready for machines.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// MetalClusterStatus is what the manager observed.
type MetalClusterStatus struct {
	// Ready is the v1beta1 contract's form of initialization.provisioned.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// Initialization is the v1beta2 contract's report.
	// +optional
	Initialization MetalClusterInitializationStatus `json:"initialization,omitempty,omitzero"`

	// Conditions: Ready, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MetalCluster is a cluster's infrastructure on machines Anvil provisions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=metalclusters,scope=Namespaced,categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta1=v1beta1"
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1beta1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type MetalCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MetalClusterSpec   `json:"spec,omitempty"`
	Status MetalClusterStatus `json:"status,omitempty"`
}

// MetalClusterList is a list of MetalClusters.
//
// +kubebuilder:object:root=true
type MetalClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []MetalCluster `json:"items"`
}
