package resources

import (
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/resource/typed"
)

// DHCPLeaseType is the type of the DHCPLease resource.
const DHCPLeaseType = resource.Type("DHCPLeases.anvil.dev")

// DHCPLease is an address handed out in full DHCP mode. Its ID is the client's MAC
// address; the DHCP server is its only writer, and it commits a lease before it
// acknowledges it.
type DHCPLease = typed.Resource[DHCPLeaseSpec, DHCPLeaseExtension]

// DHCPLeaseSpec is one lease.
type DHCPLeaseSpec struct {
	MAC      string    `yaml:"mac" protobuf:"1"`
	Address  string    `yaml:"address" protobuf:"2"`
	Hostname string    `yaml:"hostname,omitempty" protobuf:"3"`
	Expires  time.Time `yaml:"expires" protobuf:"4"`
}

// NewDHCPLease returns an empty lease for the MAC address.
func NewDHCPLease(mac resource.ID) *DHCPLease {
	return typed.NewResource[DHCPLeaseSpec, DHCPLeaseExtension](
		resource.NewMetadata(NamespaceName, DHCPLeaseType, mac, resource.VersionUndefined),
		DHCPLeaseSpec{MAC: mac},
	)
}

// DHCPLeaseExtension provides the resource definition of DHCPLease.
type DHCPLeaseExtension struct{}

// ResourceDefinition implements typed.Extension.
func (DHCPLeaseExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             DHCPLeaseType,
		Aliases:          []resource.Type{"lease", "leases", "dhcplease", "dhcpleases"},
		DefaultNamespace: NamespaceName,
		PrintColumns: []meta.PrintColumn{
			{Name: "Address", JSONPath: "{.address}"},
			{Name: "Expires", JSONPath: "{.expires}"},
		},
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[DHCPLeaseSpec](DHCPLeaseType, &DHCPLease{}))
}
