package wipe

import (
	"fmt"
	"regexp"
)

// Reasons a disk is left alone, as reported to the provider (the erase report's
// "skipped"): the provider shows them as they are, so they stay stable.
const (
	SkipCDROM     = "CD-ROM"
	SkipReadOnly  = "read-only"
	SkipNoMedium  = "no medium"
	SkipBootDisk  = "the agent booted from it"
	SkipRemovable = "removable media"
	// SkipStacked is for device-mapper and MD devices: what they hold lies on the disks
	// under them, which are wiped as disks of their own.
	SkipStacked = "a virtual device over other disks"
)

// Disk is a whole disk as the agent sees it, with what the plan decides on. The caller
// reads it (inventory, sysfs), so that Plan itself reads nothing.
type Disk struct {
	// Name is the kernel's name ("sda", "nvme0n1").
	Name string
	// Size in bytes; 0 for a drive without a medium.
	Size      uint64
	CDROM     bool
	Readonly  bool
	Transport string
	// Removable says why the disk is removable media ("on USB"), "" when it is not
	// (see Removable).
	Removable string
}

// Order is what the provider asked for.
type Order struct {
	Mode             Mode
	IncludeRemovable bool
	// BootDisks are the disks the agent booted from (see BootDisks), never wiped.
	BootDisks map[string]bool
}

// Step is the plan for one disk: wiped in Mode (then in Fallback where the drive cannot
// do Mode), or skipped for the reason in Skip.
type Step struct {
	Disk     string
	Mode     Mode
	Fallback Mode
	Skip     string
}

// stackedName matches device-mapper and MD devices by kernel name.
var stackedName = regexp.MustCompile(`^(dm-|md)[0-9]+$`)

// Plan decides, for each disk in order, how it is wiped or why it is not: never read-only
// media, CD-ROMs or drives without a medium, never virtual devices over other disks,
// never the disk the agent booted from, and removable media only when the order says so.
// A secure erase falls back to zeroes, the strongest wipe left: a wipe the provider can
// never see done would hold the machine forever.
func Plan(disks []Disk, order Order) ([]Step, error) {
	var fallback Mode

	switch order.Mode {
	case ModeFast, ModeZeroes:
	case ModeSecureErase:
		fallback = ModeZeroes
	default:
		return nil, fmt.Errorf("unsupported wipe mode %q", order.Mode)
	}

	steps := make([]Step, 0, len(disks))

	for _, d := range disks {
		step := Step{Disk: d.Name}

		switch {
		case d.CDROM:
			step.Skip = SkipCDROM
		case d.Readonly:
			step.Skip = SkipReadOnly
		case d.Size == 0:
			step.Skip = SkipNoMedium
		case d.Transport == "dm" || stackedName.MatchString(d.Name):
			step.Skip = SkipStacked
		case order.BootDisks[d.Name]:
			step.Skip = SkipBootDisk
		case d.Removable != "" && !order.IncludeRemovable:
			step.Skip = SkipRemovable + " (" + d.Removable + ")"
		default:
			step.Mode, step.Fallback = order.Mode, fallback
		}

		steps = append(steps, step)
	}

	return steps, nil
}
