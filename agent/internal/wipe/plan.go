package wipe

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/anvil-metal/anvil/agent/internal/members"
	"github.com/anvil-metal/anvil/internal/disksel"
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
	// KeptNotInstallDisk and KeptBySelector are disks the order's scope keeps.
	KeptNotInstallDisk = "kept: not the install disk"
	KeptBySelector     = "kept: matches the wipe's keep selector"
)

// Scope says which of the disks a wipe may touch it wipes.
type Scope string

// Scopes.
const (
	// ScopeAll wipes every disk it may.
	ScopeAll Scope = "all"
	// ScopeInstallDisk wipes the one disk Order.Select resolves to and keeps the others.
	ScopeInstallDisk Scope = "install-disk"
	// ScopeAllExcept keeps the disks Order.Select matches and wipes the others.
	ScopeAllExcept Scope = "all-except"
)

// Disk is a whole disk as the agent sees it, with what the plan decides on. The caller
// reads it (inventory, sysfs), so that Plan itself reads nothing. Its Size is 0 for a
// drive without a medium.
type Disk struct {
	disksel.Disk

	// Removable says why the disk is removable media ("on USB"), "" when it is not
	// (see Removable).
	Removable string
	// Members are the md arrays and LVM volume groups it (or a partition of it) is a
	// member of (members.Read).
	Members []members.Member
}

// Order is what the provider asked for.
type Order struct {
	Mode             Mode
	IncludeRemovable bool
	// BootDisks are the disks the agent booted from (see BootDisks), never wiped.
	BootDisks map[string]bool
	// Scope and Select say which disks the wipe touches ("" is ScopeAll).
	Scope  Scope
	Select disksel.Selector
}

// Step is the plan for one disk: wiped in Mode (then in Fallback where the drive cannot
// do Mode), or skipped for the reason in Skip; Kept says the order's scope kept it.
type Step struct {
	Disk     string
	Mode     Mode
	Fallback Mode
	Skip     string
	Kept     bool
}

// stackedName matches device-mapper and MD devices by kernel name.
var stackedName = regexp.MustCompile(`^(dm-|md)[0-9]+$`)

// Plan decides, for each disk in order, how it is wiped or why it is not: never read-only
// media, CD-ROMs or drives without a medium, never virtual devices over other disks,
// never the disk the agent booted from, and removable media only when the order says so.
// Within those, the order's scope keeps disks: all but the install disk, or those the
// keep selector matches. An install disk that resolves to no disk or several fails the
// plan: a wipe that cannot tell which disk it may touch touches none.
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

	kept, err := keptByScope(disks, order)
	if err != nil {
		return nil, err
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
		case kept[d.Name] != "":
			step.Skip, step.Kept = kept[d.Name], true
		case d.Removable != "" && !order.IncludeRemovable:
			step.Skip = SkipRemovable + " (" + d.Removable + ")"
		default:
			step.Mode, step.Fallback = order.Mode, fallback
		}

		steps = append(steps, step)
	}

	if err := splitArrays(disks, steps); err != nil {
		return nil, err
	}

	return steps, nil
}

// splitArrays refuses a plan that wipes some members of an md array and leaves others:
// the array would be lost all the same, with the disks that were meant to keep it. Kept
// or wiped, an array goes whole. (An LVM physical volume names itself only: its volume
// group is not read, so this holds for md arrays.)
func splitArrays(disks []Disk, steps []Step) error {
	type side struct{ wiped, left []string }

	arrays := map[string]*side{}
	names := map[string]string{}

	var order []string

	for i, d := range disks {
		for _, m := range d.Members {
			if m.Kind != members.KindMD || m.Set == "" {
				continue
			}

			a := arrays[m.Set]
			if a == nil {
				a = &side{}
				arrays[m.Set] = a
				names[m.Set] = m.Name

				order = append(order, m.Set)
			}

			if steps[i].Skip == "" {
				a.wiped = append(a.wiped, d.Name)
			} else {
				a.left = append(a.left, d.Name+" ("+steps[i].Skip+")")
			}
		}
	}

	for _, set := range order {
		if a := arrays[set]; len(a.wiped) > 0 && len(a.left) > 0 {
			return fmt.Errorf("md array %s (%s) would be split: the wipe takes %s and leaves %s; keep all of its members or none",
				names[set], set, strings.Join(a.wiped, ", "), strings.Join(a.left, ", "))
		}
	}

	return nil
}

// keptByScope names the disks the order's scope keeps, with why.
func keptByScope(disks []Disk, order Order) (map[string]string, error) {
	kept := map[string]string{}

	switch order.Scope {
	case ScopeAll, "":
	case ScopeInstallDisk:
		if order.Select.IsZero() {
			return nil, errors.New("wipe scope install-disk without an install disk selector")
		}

		all := make([]disksel.Disk, 0, len(disks))
		for _, d := range disks {
			all = append(all, d.Disk)
		}

		install, err := order.Select.Resolve(all)
		if err != nil {
			return nil, fmt.Errorf("finding the install disk to wipe: %w", err)
		}

		for _, d := range disks {
			if d.Name != install.Name {
				kept[d.Name] = KeptNotInstallDisk + " (" + order.Select.String() + ")"
			}
		}
	case ScopeAllExcept:
		if order.Select.IsZero() {
			// An empty keep selector would keep every disk, which is no wipe at all.
			return nil, errors.New("wipe scope all-except without a keep selector")
		}

		for _, d := range disks {
			if order.Select.Matches(d.Disk) {
				kept[d.Name] = KeptBySelector + " (" + order.Select.String() + ")"
			}
		}
	default:
		return nil, fmt.Errorf("unsupported wipe scope %q", order.Scope)
	}

	return kept, nil
}
