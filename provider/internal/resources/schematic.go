package resources

import (
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/resource/typed"
)

// SchematicType is the type of the Schematic resource.
const SchematicType = resource.Type("Schematics.anvil.dev")

// Schematic is an Image Factory schematic some allocation boots, and whether the factory
// knows it. Its ID is the schematic ID; SchematicController is its only writer.
type Schematic = typed.Resource[SchematicSpec, SchematicExtension]

// SchematicSpec is a schematic's content and its registration.
type SchematicSpec struct {
	Extensions   []string  `yaml:"extensions,omitempty" protobuf:"1"`
	KernelArgs   []string  `yaml:"kernelArgs,omitempty" protobuf:"2"`
	Registered   bool      `yaml:"registered" protobuf:"3"`
	RegisteredAt time.Time `yaml:"registeredAt,omitempty" protobuf:"4"`
	// LastError is why the last registration failed.
	LastError string `yaml:"lastError,omitempty" protobuf:"5"`
}

// NewSchematic returns an empty Schematic resource.
func NewSchematic(id resource.ID) *Schematic {
	return typed.NewResource[SchematicSpec, SchematicExtension](
		resource.NewMetadata(NamespaceName, SchematicType, id, resource.VersionUndefined),
		SchematicSpec{},
	)
}

// SchematicExtension provides the resource definition of Schematic.
type SchematicExtension struct{}

// ResourceDefinition implements typed.Extension.
func (SchematicExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             SchematicType,
		Aliases:          []resource.Type{"schematic", "schematics"},
		DefaultNamespace: NamespaceName,
		PrintColumns: []meta.PrintColumn{
			{Name: "Registered", JSONPath: "{.registered}"},
			{Name: "Error", JSONPath: "{.lastError}"},
		},
	}
}

func init() {
	mustRegister(protobuf.RegisterDynamic[SchematicSpec](SchematicType, &Schematic{}))
}
