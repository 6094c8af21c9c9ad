package maintenance

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/registry"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// ExtensionName is the name of the extension that tells Omni the machine runs the
// metal agent (Omni's MetalAgentExtensionName): Omni then pushes it no
// configuration, does not look for its schematic and leaves its boot to the provider.
const ExtensionName = "metal-agent"

// Definitions are the types the maintenance API adds to the inventory's: what the
// machine says of itself while the agent serves the API.
func Definitions() []meta.ResourceWithRD {
	return []meta.ResourceWithRD{
		&runtimeres.MachineStatus{},
		&runtimeres.ExtensionStatus{},
	}
}

// machineStatus is Talos in maintenance mode, ready: Omni's status snapshot turns the
// stage into "in maintenance", and a snapshot's existence is what makes the machine
// allocatable. Ready because the agent serving this API is all the readiness a
// machine in maintenance has; it waits for nothing else.
func machineStatus() runtimeres.MachineStatusSpec {
	return runtimeres.MachineStatusSpec{
		Stage:  runtimeres.MachineStageMaintenance,
		Status: runtimeres.MachineStatusStatus{Ready: true},
	}
}

// extensionStatus is the metal-agent extension at the agent's version. Image stays
// empty: Talos names the squashfs layer there, and the agent is no layer.
func extensionStatus(agentVersion string) runtimeres.ExtensionStatusSpec {
	return extensions.Layer{
		Metadata: extensions.Metadata{
			Name:        ExtensionName,
			Version:     agentVersion,
			Author:      "Anvil",
			Description: "Anvil's metal agent: the machine is in agent mode and takes no configuration.",
		},
	}
}

// schematicStatus is the image factory's schematic meta extension, as Talos booted
// from a factory image reports it: the factory's first layer, in its words.
func schematicStatus(id, manifest, factory string) runtimeres.ExtensionStatusSpec {
	return extensions.Layer{
		Image: "000-" + SchematicExtensionName + ".sqsh",
		Metadata: extensions.Metadata{
			Name: SchematicExtensionName, Version: id, ExtraInfo: manifest,
			Author:      "Image Factory (" + factory + ")",
			Description: "Virtual extension which specifies the schematic of the image built with Image Factory.",
		},
	}
}

// publish registers Definitions in st and writes the machine status and the
// metal-agent extension status, or, for Talos, its stage and schematic. A definition
// already registered (a second server over the same state) is kept as is.
func publish(ctx context.Context, st state.State, agentVersion string, talos *Talos) error {
	rds := registry.NewResourceRegistry(st)

	for _, r := range Definitions() {
		if err := rds.Register(ctx, r); err != nil && !state.IsConflictError(err) {
			return fmt.Errorf("error registering resource definition %s: %w", r.ResourceDefinition().Type, err)
		}
	}

	if err := safe.StateModify(ctx, st, runtimeres.NewMachineStatus(), func(res *runtimeres.MachineStatus) error {
		*res.TypedSpec() = machineStatus()
		if talos != nil {
			*res.TypedSpec() = talos.status()
		}

		return nil
	}); err != nil {
		return fmt.Errorf("error writing the machine status: %w", err)
	}

	name, spec := ExtensionName, extensionStatus(agentVersion)
	if talos != nil {
		name, spec = SchematicExtensionName, schematicStatus(talos.Schematic, talos.SchematicManifest, talos.Factory)
	}

	if err := safe.StateModify(ctx, st, runtimeres.NewExtensionStatus(runtimeres.NamespaceName, name), func(res *runtimeres.ExtensionStatus) error {
		*res.TypedSpec() = spec

		return nil
	}); err != nil {
		return fmt.Errorf("error writing the %s extension status: %w", name, err)
	}

	return nil
}
