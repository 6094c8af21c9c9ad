package maintenance

import (
	"context"
	"crypto/tls"
	"net/netip"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// SchematicExtensionName is the image factory's meta extension (its
// constants.SchematicIDExtensionName): Talos reports its schematic ID as this
// extension's version, and Omni reads the machine's schematic from it.
const SchematicExtensionName = "schematic"

// Talos makes the API speak for a Talos machine rather than for the agent: the lab's
// stand-in Talos, which Omni must take for Talos through a cluster's life (its config
// applied in maintenance, its install, its reset). Omni applies a cluster's config only
// to a machine whose schematic it knows, and resets a running machine over Talos' API
// with mutual TLS.
type Talos struct {
	// Version is the Talos version reported (Version's tag), with its "v".
	Version string
	// Schematic is the schematic ID the machine booted, reported as the schematic
	// extension's version.
	Schematic string
	// SchematicManifest is the schematic's document, reported beside its ID as Talos
	// does (the factory bakes it into the image): Omni reads the schematic's kernel
	// arguments from it, and generates no config for a machine without it.
	SchematicManifest string
	// Factory is the base URL of the image factory the machine's image came from: the
	// schematic extension's author names it, as the factory writes it.
	Factory string
	// Meta are the META keys set when the API starts. An installed Talos has its STATE
	// encryption config there (meta.StateEncryptionConfig), which Omni deletes before a
	// reset; MetaDelete deletes each once, and a key not there is NotFound.
	Meta []uint8
	// Stage is the machine's stage: maintenance (booted without a config) or running.
	Stage runtimeres.MachineStage
	// TLS, when set, gives the server's TLS configuration for the addresses it listens
	// on: an installed machine's API, whose certificate its machine config's CA signs
	// and which asks clients for theirs. Nil is maintenance's: self-signed, no client
	// certificate.
	TLS func(addrs []netip.Addr) (*tls.Config, error)
	// Apply applies a config ApplyConfiguration took (loaded and valid for the machine)
	// in the mode Talos answers with: NO_REBOOT or TRY now, STAGED at the next boot,
	// REBOOT now and then a reboot. Nil answers Unimplemented.
	Apply func(ctx context.Context, config []byte, mode machine.ApplyConfigurationRequest_Mode) error
	// Reset carries out MachineService/Reset (the machinery client's ResetGeneric) as
	// the actor named, whose ID goes on the events the reset sends; nil answers
	// Unimplemented. It must return before the machine goes down: the caller waits for
	// the answer.
	Reset func(ctx context.Context, req *machine.ResetRequest, actor string) error
}

// status is the machine's status at t's stage, ready: a stand-in has nothing else to
// wait for.
func (t *Talos) status() runtimeres.MachineStatusSpec {
	return runtimeres.MachineStatusSpec{Stage: t.Stage, Status: runtimeres.MachineStatusStatus{Ready: true}}
}
