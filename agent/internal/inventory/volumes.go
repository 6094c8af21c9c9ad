package inventory

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/agent/internal/members"
)

// VolumesController publishes, as Talos' block.DiscoveredVolume, the md RAID and LVM
// members among the disks and their partitions: what arrays and volume groups the
// machine's disks hold, read from their metadata (the agent assembles neither). It reads
// again when the disks change.
type VolumesController struct {
	// DevRoot holds the disks' device nodes; empty reads nothing.
	DevRoot string
	// Read reads a disk's members (members.Read when nil).
	Read func(path string) ([]members.Member, error)

	firstPass
}

// Name implements controller.Controller.
func (ctrl *VolumesController) Name() string { return "inventory.VolumesController" }

// Inputs implements controller.Controller.
func (ctrl *VolumesController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: block.NamespaceName, Type: block.DiskType, Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *VolumesController) Outputs() []controller.Output {
	return []controller.Output{{Type: block.DiscoveredVolumeType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *VolumesController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	read := ctrl.Read
	if read == nil {
		read = members.Read
	}

	pace := ctrl.pacer(nil)

	for pace.next(ctx, r) {
		disks, err := safe.ReaderListAll[*block.Disk](ctx, r)
		if err != nil {
			return fmt.Errorf("error listing disks: %w", err)
		}

		r.StartTrackingOutputs()

		for disk := range disks.All() {
			spec := disk.TypedSpec()
			if ctrl.DevRoot == "" || spec.CDROM || spec.Size == 0 {
				continue
			}

			found, err := read(filepath.Join(ctrl.DevRoot, disk.Metadata().ID()))
			if err != nil {
				// A disk that cannot be read says nothing of what it belongs to.
				logger.Warn("error reading a disk's RAID and LVM signatures", zap.String("disk", disk.Metadata().ID()), zap.Error(err))

				continue
			}

			for _, m := range found {
				if err = safe.WriterModify(ctx, r, block.NewDiscoveredVolume(block.NamespaceName, m.Device(disk.Metadata().ID())), func(res *block.DiscoveredVolume) error {
					v := res.TypedSpec()
					v.DevPath = "/dev/" + m.Device(disk.Metadata().ID())
					v.Parent, v.ParentDevPath = disk.Metadata().ID(), spec.DevPath
					v.Type, v.PartitionIndex = "disk", m.Partition
					if m.Partition > 0 {
						v.Type = "partition"
					}

					v.Name, v.UUID, v.Label = m.Signature(), m.Set, m.Name
					if m.Kind == members.KindLVM {
						v.UUID, v.Label = "", m.Set // blkid reports an LVM PV's UUID as its label
					}

					return nil
				}); err != nil {
					return fmt.Errorf("error updating volume %s: %w", m.Device(disk.Metadata().ID()), err)
				}
			}
		}

		if err = safe.CleanupOutputs[*block.DiscoveredVolume](ctx, r); err != nil {
			return fmt.Errorf("error cleaning up volumes: %w", err)
		}
	}

	return nil
}
