package wipe_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
	"github.com/anvil-metal/anvil/internal/disksel"
)

// image writes a 1 MiB disk image with what write puts in it.
func image(t *testing.T, write func(b []byte)) string {
	t.Helper()

	b := make([]byte, 1<<20)
	write(b)

	path := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(path, b, 0o600))

	return path
}

// mdMember writes an md v1.2 superblock (4 KiB into the device) of array uuid, named name,
// as mdadm --create does (struct mdp_superblock_1's constant part).
func mdMember(uuid [16]byte, name string) func(b []byte) {
	return func(b []byte) {
		sb := b[4096:]
		binary.LittleEndian.PutUint32(sb[0:], 0xa92b4efc) // magic
		binary.LittleEndian.PutUint32(sb[4:], 1)          // major version
		copy(sb[16:32], uuid[:])
		copy(sb[32:64], name)
		binary.LittleEndian.PutUint32(sb[72:], 1)     // level: RAID1
		binary.LittleEndian.PutUint32(sb[92:], 2)     // raid disks
		binary.LittleEndian.PutUint64(sb[128:], 2048) // data offset
		binary.LittleEndian.PutUint64(sb[144:], 8)    // super offset: sector 8
	}
}

// lvmPV writes an LVM2 physical volume label in the second sector, as pvcreate does.
func lvmPV(b []byte) {
	l := b[512:]
	copy(l[0:], "LABELONE")
	binary.LittleEndian.PutUint64(l[8:], 1) // this sector
	binary.LittleEndian.PutUint32(l[20:], 32)
	copy(l[24:], "LVM2 001")
	copy(l[32:], "AbCdEfGhIjKlMnOpQrStUvWxYz012345")
}

func TestMembers(t *testing.T) {
	t.Parallel()

	array := [16]byte{0x6d, 0x64, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}

	for _, tc := range []struct {
		name  string
		write func(b []byte)
		want  []wipe.Member
	}{
		{name: "an md RAID member", write: mdMember(array, "lab:0"), want: []wipe.Member{
			{Kind: wipe.MemberMD, Set: "6d640001-0203-0405-0607-08090a0b0c0d", Name: "lab:0"},
		}},
		{name: "an LVM physical volume", write: lvmPV, want: []wipe.Member{
			{Kind: wipe.MemberLVM, Set: "AbCdEf-GhIj-KlMn-OpQr-StUv-WxYz-012345"},
		}},
		{name: "nothing", write: func([]byte) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			path := image(t, tc.write)

			before, err := os.ReadFile(path)
			require.NoError(t, err)

			got, err := wipe.Members(path)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)

			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, before, after, "reading the members writes nothing")
		})
	}

	_, err := wipe.Members(filepath.Join(t.TempDir(), "gone"))
	assert.ErrorContains(t, err, "error reading the signatures of")
}

// TestPlanSplitArrays: an md array goes whole, kept or wiped; a wipe that would take some
// of its members and leave others is refused before any disk is touched.
func TestPlanSplitArrays(t *testing.T) {
	t.Parallel()

	member := func(name, serial string, set string) wipe.Disk {
		return wipe.Disk{
			Disk:    disksel.Disk{Name: name, Serial: serial, Size: 1 << 30, Transport: "sata"},
			Members: []wipe.Member{{Kind: wipe.MemberMD, Set: set, Name: "host:data"}},
		}
	}

	disks := []wipe.Disk{
		member("sda", "A1", "set-1"), member("sdb", "A2", "set-1"),
		member("sdc", "C", "set-2"), member("sdd", "D", "set-2"),
		{Disk: disksel.Disk{Name: "sde", Serial: "E", Size: 1 << 30, Transport: "sata"}, Members: []wipe.Member{{Kind: wipe.MemberLVM, Set: "pv-1"}}},
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
