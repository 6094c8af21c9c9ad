package inventory

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/go-procfs/procfs"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
)

// PlatformMetadataController publishes the singleton runtime.PlatformMetadata as
// Talos' metal platform fills it: platform "metal", the hostname given on the
// kernel command line (talos.hostname=) and the SMBIOS UUID as instance ID. Omni
// shows the platform as a label.
type PlatformMetadataController struct {
	ProcRoot string

	firstPass
}

// Name implements controller.Controller.
func (ctrl *PlatformMetadataController) Name() string { return "inventory.PlatformMetadataController" }

// Inputs implements controller.Controller.
func (ctrl *PlatformMetadataController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: hardware.NamespaceName, Type: hardware.SystemInformationType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *PlatformMetadataController) Outputs() []controller.Output {
	return []controller.Output{{Type: runtimeres.PlatformMetadataType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller: it writes on the first event and again
// when the system information appears or changes.
func (ctrl *PlatformMetadataController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	pace := ctrl.pacer(nil)
	cmdline := optionalCmdline(ctrl.ProcRoot, logger)

	for pace.next(ctx, r) {
		system, err := safe.ReaderGetByID[*hardware.SystemInformation](ctx, r, hardware.SystemInformationID)
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("error reading system information: %w", err)
		}

		if err = safe.WriterModify(ctx, r, runtimeres.NewPlatformMetadataSpec(runtimeres.NamespaceName, runtimeres.PlatformMetadataID),
			func(res *runtimeres.PlatformMetadata) error {
				*res.TypedSpec() = platformMetadata(cmdline, system)

				return nil
			}); err != nil {
			return fmt.Errorf("error updating platform metadata: %w", err)
		}
	}

	return nil
}

// platformMetadata builds the metal platform's metadata from the kernel command
// line and the system information (nil until SMBIOS is read, or without it).
func platformMetadata(cmdline string, system *hardware.SystemInformation) runtimeres.PlatformMetadataSpec {
	spec := runtimeres.PlatformMetadataSpec{Platform: constants.PlatformMetal}

	if hostname := procfs.NewCmdline(cmdline).Get(constants.KernelParamHostname).First(); hostname != nil {
		spec.Hostname = *hostname
	}

	if system != nil {
		spec.InstanceID = system.TypedSpec().UUID
	}

	return spec
}
