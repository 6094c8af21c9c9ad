package wipe_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
)

func TestPlan(t *testing.T) {
	t.Parallel()

	const gib = 1 << 30

	disk := func(name string) wipe.Disk { return wipe.Disk{Name: name, Size: 10 * gib, Transport: "sata"} }
	with := func(d wipe.Disk, change func(*wipe.Disk)) wipe.Disk {
		change(&d)

		return d
	}

	fast := wipe.Order{Mode: wipe.ModeFast}

	for _, tc := range []struct {
		name  string
		disk  wipe.Disk
		order wipe.Order
		want  wipe.Step
	}{
		{
			name: "a plain disk is wiped in the order's mode",
			disk: disk("sda"), order: fast,
			want: wipe.Step{Disk: "sda", Mode: wipe.ModeFast},
		},
		{
			name: "zeroes",
			disk: disk("sda"), order: wipe.Order{Mode: wipe.ModeZeroes},
			want: wipe.Step{Disk: "sda", Mode: wipe.ModeZeroes},
		},
		{
			name: "a secure erase falls back to zeroes",
			disk: disk("nvme0n1"), order: wipe.Order{Mode: wipe.ModeSecureErase},
			want: wipe.Step{Disk: "nvme0n1", Mode: wipe.ModeSecureErase, Fallback: wipe.ModeZeroes},
		},
		{
			name: "CD-ROM",
			disk: with(disk("sr0"), func(d *wipe.Disk) { d.CDROM, d.Readonly = true, true }), order: fast,
			want: wipe.Step{Disk: "sr0", Skip: "CD-ROM"},
		},
		{
			name: "an empty CD-ROM tray is a CD-ROM",
			disk: with(disk("sr0"), func(d *wipe.Disk) { d.CDROM, d.Size = true, 0 }), order: fast,
			want: wipe.Step{Disk: "sr0", Skip: "CD-ROM"},
		},
		{
			name: "read-only",
			disk: with(disk("sdb"), func(d *wipe.Disk) { d.Readonly = true }), order: fast,
			want: wipe.Step{Disk: "sdb", Skip: "read-only"},
		},
		{
			name: "no medium",
			disk: with(disk("sdc"), func(d *wipe.Disk) { d.Size = 0 }), order: fast,
			want: wipe.Step{Disk: "sdc", Skip: "no medium"},
		},
		{
			name: "device-mapper",
			disk: with(disk("dm-0"), func(d *wipe.Disk) { d.Transport = "dm" }), order: fast,
			want: wipe.Step{Disk: "dm-0", Skip: wipe.SkipStacked},
		},
		{
			name: "device-mapper by name",
			disk: with(disk("dm-12"), func(d *wipe.Disk) { d.Transport = "" }), order: fast,
			want: wipe.Step{Disk: "dm-12", Skip: wipe.SkipStacked},
		},
		{
			name: "MD RAID",
			disk: with(disk("md127"), func(d *wipe.Disk) { d.Transport = "" }), order: fast,
			want: wipe.Step{Disk: "md127", Skip: wipe.SkipStacked},
		},
		{
			name: "the boot disk",
			disk: disk("vda"), order: wipe.Order{Mode: wipe.ModeZeroes, BootDisks: map[string]bool{"vda": true}},
			want: wipe.Step{Disk: "vda", Skip: "the agent booted from it"},
		},
		{
			name:  "the boot disk even when removable and removable media are asked for",
			disk:  with(disk("sdd"), func(d *wipe.Disk) { d.Removable = "on USB" }),
			order: wipe.Order{Mode: wipe.ModeFast, IncludeRemovable: true, BootDisks: map[string]bool{"sdd": true}},
			want:  wipe.Step{Disk: "sdd", Skip: "the agent booted from it"},
		},
		{
			name: "removable media",
			disk: with(disk("sde"), func(d *wipe.Disk) { d.Removable = "on USB" }), order: fast,
			want: wipe.Step{Disk: "sde", Skip: "removable media (on USB)"},
		},
		{
			name: "an SD card",
			disk: with(disk("mmcblk0"), func(d *wipe.Disk) { d.Transport, d.Removable = "mmc", "an SD card" }), order: fast,
			want: wipe.Step{Disk: "mmcblk0", Skip: "removable media (an SD card)"},
		},
		{
			name:  "removable media when the order asks",
			disk:  with(disk("sde"), func(d *wipe.Disk) { d.Removable = "flagged removable" }),
			order: wipe.Order{Mode: wipe.ModeFast, IncludeRemovable: true},
			want:  wipe.Step{Disk: "sde", Mode: wipe.ModeFast},
		},
		{
			name: "a read-only CD-ROM reads as a CD-ROM",
			disk: with(disk("sr1"), func(d *wipe.Disk) { d.CDROM, d.Readonly, d.Removable = true, true, "flagged removable" }), order: fast,
			want: wipe.Step{Disk: "sr1", Skip: "CD-ROM"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			steps, err := wipe.Plan([]wipe.Disk{tc.disk}, tc.order)
			require.NoError(t, err)
			assert.Equal(t, []wipe.Step{tc.want}, steps)
		})
	}
}

func TestPlanKeepsOrder(t *testing.T) {
	t.Parallel()

	steps, err := wipe.Plan([]wipe.Disk{
		{Name: "nvme0n1", Size: 1 << 30},
		{Name: "sr0", CDROM: true},
		{Name: "vda", Size: 1 << 30},
	}, wipe.Order{Mode: wipe.ModeZeroes, BootDisks: map[string]bool{"vda": true}})
	require.NoError(t, err)

	assert.Equal(t, []wipe.Step{
		{Disk: "nvme0n1", Mode: wipe.ModeZeroes},
		{Disk: "sr0", Skip: wipe.SkipCDROM},
		{Disk: "vda", Skip: wipe.SkipBootDisk},
	}, steps)

	steps, err = wipe.Plan(nil, wipe.Order{Mode: wipe.ModeFast})
	require.NoError(t, err)
	assert.Empty(t, steps)
}

func TestPlanRefusesUnknownModes(t *testing.T) {
	t.Parallel()

	for _, mode := range []wipe.Mode{"", "shred"} {
		_, err := wipe.Plan([]wipe.Disk{{Name: "sda", Size: 1 << 30}}, wipe.Order{Mode: mode})
		assert.ErrorContains(t, err, "unsupported wipe mode", mode)
	}
}
