package wipe_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/members"
	"github.com/anvil-metal/anvil/agent/internal/wipe"
	"github.com/anvil-metal/anvil/internal/disksel"
)

func TestPlan(t *testing.T) {
	t.Parallel()

	const gib = 1 << 30

	disk := func(name string) wipe.Disk {
		return wipe.Disk{Disk: disksel.Disk{Name: name, Size: 10 * gib, Transport: "sata"}}
	}
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
		{Disk: disksel.Disk{Name: "nvme0n1", Size: 1 << 30}},
		{Disk: disksel.Disk{Name: "sr0", CDROM: true}},
		{Disk: disksel.Disk{Name: "vda", Size: 1 << 30}},
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
		_, err := wipe.Plan([]wipe.Disk{{Disk: disksel.Disk{Name: "sda", Size: 1 << 30}}}, wipe.Order{Mode: mode})
		assert.ErrorContains(t, err, "unsupported wipe mode", mode)
	}
}

// storageServer is the disks of a storage server's inventory (disksel's fixture): two
// SATA boot SSDs, two SAS data disks, three NVMe, a virtual CD-ROM and a USB stick.
func storageServer(t *testing.T) []wipe.Disk {
	t.Helper()

	data, err := os.ReadFile("../../../internal/disksel/testdata/storage-server.json")
	require.NoError(t, err)

	var found []disksel.Disk
	require.NoError(t, json.Unmarshal(data, &found))

	disks := make([]wipe.Disk, 0, len(found))

	for _, d := range found {
		disk := wipe.Disk{Disk: d}
		if d.Transport == "usb" && !d.CDROM {
			disk.Removable = "on USB"
		}

		disks = append(disks, disk)
	}

	return disks
}

// TestPlanScope: the order's scope keeps disks, and says so per disk; the disks no wipe
// may touch keep their own reasons.
func TestPlanScope(t *testing.T) {
	t.Parallel()

	selector := func(text string) disksel.Selector {
		sel, err := disksel.Parse(text)
		require.NoError(t, err)

		return sel
	}

	const (
		keptData    = wipe.KeptBySelector + " (model=ST16000*)"
		notInstall  = wipe.KeptNotInstallDisk + " (serial=S64FNE0R801234)"
		removable   = wipe.SkipRemovable + " (on USB)"
		bootDisk    = wipe.SkipBootDisk
		cdrom       = wipe.SkipCDROM
		wiped       = ""
		wipedAndUSB = "usb"
	)

	for _, tc := range []struct {
		name  string
		order wipe.Order
		want  map[string]string // disk: skip reason, "" when wiped
	}{
		{
			name:  "all",
			order: wipe.Order{Mode: wipe.ModeFast, Scope: wipe.ScopeAll, BootDisks: map[string]bool{"sda": true}},
			want: map[string]string{
				"sda": bootDisk, "sdb": wiped, "sdc": wiped, "sdd": wiped, "nvme0n1": wiped, "nvme1n1": wiped, "nvme2n1": wiped,
				"sr0": cdrom, "sde": removable,
			},
		},
		{
			name:  "all but the SAS data disks",
			order: wipe.Order{Mode: wipe.ModeFast, Scope: wipe.ScopeAllExcept, Select: selector("model=ST16000*")},
			want: map[string]string{
				"sda": wiped, "sdb": wiped, "sdc": keptData, "sdd": keptData, "nvme0n1": wiped, "nvme1n1": wiped, "nvme2n1": wiped,
				"sr0": cdrom, "sde": removable,
			},
		},
		{
			name: "the install disk only",
			order: wipe.Order{
				Mode: wipe.ModeFast, Scope: wipe.ScopeInstallDisk, Select: selector("serial=S64FNE0R801234"), IncludeRemovable: true,
			},
			want: map[string]string{
				"sda": notInstall, "sdb": notInstall, "sdc": notInstall, "sdd": notInstall, "nvme0n1": wiped,
				"nvme1n1": notInstall, "nvme2n1": notInstall, "sr0": cdrom, "sde": notInstall,
			},
		},
		{
			name: "a removable disk asked for and not kept",
			order: wipe.Order{
				Mode: wipe.ModeFast, Scope: wipe.ScopeAllExcept, Select: selector("type=nvme"), IncludeRemovable: true,
			},
			want: map[string]string{
				"sda": wiped, "sdb": wiped, "sdc": wiped, "sdd": wiped, "sde": wipedAndUSB, "sr0": cdrom,
				"nvme0n1": wipe.KeptBySelector + " (type=nvme)", "nvme1n1": wipe.KeptBySelector + " (type=nvme)", "nvme2n1": wipe.KeptBySelector + " (type=nvme)",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			steps, err := wipe.Plan(storageServer(t), tc.order)
			require.NoError(t, err)
			require.Len(t, steps, len(tc.want))

			for _, step := range steps {
				want := tc.want[step.Disk]
				if want == wipedAndUSB {
					want = wiped
				}

				assert.Equal(t, want, step.Skip, step.Disk)
				assert.Equal(t, want == wiped, step.Mode == wipe.ModeFast, "%s is wiped", step.Disk)
				assert.Equal(t, strings.HasPrefix(want, "kept:"), step.Kept, "%s is kept by the scope", step.Disk)
			}
		})
	}
}

// TestPlanScopeRefuses: a scope that cannot tell which disks it may touch wipes none.
func TestPlanScopeRefuses(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, scope, selector, want string
	}{
		{name: "no install disk", scope: "install-disk", selector: "serial=gone", want: "matches none of the machine's disks"},
		{name: "two install disks", scope: "install-disk", selector: "type=nvme,size>1TB", want: "matches 2 disks"},
		{name: "an install disk without a selector", scope: "install-disk", want: "without an install disk selector"},
		{name: "a keep selector that is empty", scope: "all-except", want: "without a keep selector"},
		{name: "an unknown scope", scope: "most", selector: "type=nvme", want: `unsupported wipe scope "most"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			sel, err := disksel.Parse(tc.selector)
			require.NoError(t, err)

			steps, err := wipe.Plan(storageServer(t), wipe.Order{Mode: wipe.ModeFast, Scope: wipe.Scope(tc.scope), Select: sel})
			assert.ErrorContains(t, err, tc.want)
			assert.Empty(t, steps)
		})
	}
}

// TestPlanSplitArrays: an md array goes whole, kept or wiped; a wipe that would take some
// of its members and leave others is refused before any disk is touched.
func TestPlanSplitArrays(t *testing.T) {
	t.Parallel()

	member := func(name, serial string, set string) wipe.Disk {
		return wipe.Disk{
			Disk:    disksel.Disk{Name: name, Serial: serial, Size: 1 << 30, Transport: "sata"},
			Members: []members.Member{{Kind: members.KindMD, Set: set, Name: "host:data"}},
		}
	}

	disks := []wipe.Disk{
		member("sda", "A1", "set-1"), member("sdb", "A2", "set-1"),
		member("sdc", "C", "set-2"), member("sdd", "D", "set-2"),
		{Disk: disksel.Disk{Name: "sde", Serial: "E", Size: 1 << 30, Transport: "sata"}, Members: []members.Member{{Kind: members.KindLVM, Set: "pv-1"}}},
	}

	sel := func(text string) disksel.Selector {
		s, err := disksel.Parse(text)
		require.NoError(t, err)

		return s
	}

	for _, tc := range []struct {
		name    string
		order   wipe.Order
		wantErr string
	}{
		{name: "every member wiped", order: wipe.Order{Mode: wipe.ModeFast}},
		{name: "an array kept whole", order: wipe.Order{Mode: wipe.ModeFast, Scope: wipe.ScopeAllExcept, Select: sel("serial=A*")}},
		{
			name: "one member kept", order: wipe.Order{Mode: wipe.ModeFast, Scope: wipe.ScopeAllExcept, Select: sel("serial=C")},
			wantErr: "md array host:data (set-2) would be split: the wipe takes sdd and leaves sdc (kept: matches the wipe's keep selector (serial=C))",
		},
		{name: "one member the install disk", order: wipe.Order{Mode: wipe.ModeFast, Scope: wipe.ScopeInstallDisk, Select: sel("serial=A2")}, wantErr: "set-1) would be split: the wipe takes sdb and leaves sda (kept: not the install disk"},
		{name: "one member the boot disk", order: wipe.Order{Mode: wipe.ModeFast, BootDisks: map[string]bool{"sdc": true}}, wantErr: "set-2) would be split: the wipe takes sdd and leaves sdc (the agent booted from it)"},
		{name: "an LVM volume alone", order: wipe.Order{Mode: wipe.ModeFast, Scope: wipe.ScopeAllExcept, Select: sel("serial=E")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			steps, err := wipe.Plan(disks, tc.order)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.Empty(t, steps, "nothing planned")

				return
			}

			require.NoError(t, err)
		})
	}
}
