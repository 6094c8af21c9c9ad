package disksel_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/disksel"
)

// fixture is the disks of an inventory in testdata: a storage server (two SATA boot
// SSDs, SAS disks, three NVMe, a virtual CD and a USB stick) and the lab's QEMU machine.
func fixture(t *testing.T, name string) []disksel.Disk {
	t.Helper()

	data, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	require.NoError(t, err)

	var disks []disksel.Disk
	require.NoError(t, json.Unmarshal(data, &disks))

	return disks
}

func TestResolve(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, fixture, selector string
		want                    string   // the disk's name
		wantMatches             []string // an *Error with these matches
		wantIdentity            string
	}{
		{
			name: "the smallest NVMe of at least 400 GB", fixture: "storage-server", selector: "type=nvme,size>=400GB,pick=smallest",
			want: "nvme0n1", wantIdentity: "serial=S64FNE0R801234",
		},
		{
			name: "the largest NVMe is a tie", fixture: "storage-server", selector: "type=nvme,pick=largest",
			wantMatches: []string{"nvme1n1", "nvme2n1"},
		},
		{
			name: "NVMe without a pick is ambiguous", fixture: "storage-server", selector: "type=nvme",
			wantMatches: []string{"nvme0n1", "nvme1n1", "nvme2n1"},
		},
		{name: "by serial", fixture: "storage-server", selector: "serial=2149331A5B02", want: "sdb", wantIdentity: "serial=2149331A5B02"},
		{name: "by WWID glob", fixture: "storage-server", selector: "wwid=naa.500a0751331a4*", want: "sda", wantIdentity: "serial=2149331A4F1E"},
		{
			name: "by model glob and bus", fixture: "storage-server", selector: "model=MTFDDAV*, bus=/pci0000:00/0000:00:17.0/ata1/*",
			want: "sda", wantIdentity: "serial=2149331A4F1E",
		},
		{name: "a size range", fixture: "storage-server", selector: "size>=1TB,size<=4TB,transport=nvme,pick=smallest", wantMatches: []string{"nvme1n1", "nvme2n1"}},
		{name: "an HDD", fixture: "storage-server", selector: "type=hdd,serial=ZL2ABC02", want: "sdd", wantIdentity: "serial=ZL2ABC02"},
		{name: "SSDs are not rotational", fixture: "storage-server", selector: "type=ssd,transport=sata", wantMatches: []string{"sda", "sdb"}},
		{name: "nothing matches", fixture: "storage-server", selector: "model=INTEL*", wantMatches: []string{}},
		{name: "a CD-ROM is never installable", fixture: "storage-server", selector: "model=Virtual*", wantMatches: []string{}},
		{name: "a USB stick is a disk like any", fixture: "storage-server", selector: "transport=usb", want: "sde", wantIdentity: "serial=4C530001230613115303"},
		{name: "the lab's install disk", fixture: "lab-q35", selector: "serial=anvil-install", want: "vda", wantIdentity: "serial=anvil-install"},
		{name: "an exact size", fixture: "lab-q35", selector: "size=10GiB", want: "vda", wantIdentity: "serial=anvil-install"},
		{name: "by kernel name", fixture: "lab-q35", selector: "name=nvme*", want: "nvme0n1", wantIdentity: "serial=anvil-nvme"},
		{name: "the empty selector on several disks", fixture: "lab-q35", selector: "", wantMatches: []string{"vda", "vdb", "vdc", "nvme0n1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			disks := fixture(t, tc.fixture)

			sel, err := disksel.Parse(tc.selector)
			require.NoError(t, err)

			got, err := sel.Resolve(disks)
			if tc.wantMatches != nil {
				var selErr *disksel.Error
				require.ErrorAs(t, err, &selErr)

				names := []string{}
				for _, d := range selErr.Matches {
					names = append(names, d.Name)
				}

				assert.Equal(t, tc.wantMatches, names)

				for _, d := range selErr.Matches {
					assert.Contains(t, err.Error(), d.String(), "the candidates are listed")
				}

				if len(tc.wantMatches) == 0 {
					assert.Contains(t, err.Error(), "matches none", err)
				}

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, got.Name)

			id, err := disksel.IdentityOf(got, disks)
			require.NoError(t, err)
			assert.Equal(t, tc.wantIdentity, id.String())

			// The identity selects that disk and no other.
			again, err := id.Selector().Resolve(disks)
			require.NoError(t, err)
			assert.Equal(t, got.Name, again.Name)
		})
	}
}

func TestIdentityOf(t *testing.T) {
	t.Parallel()

	disks := []disksel.Disk{
		{Name: "vda", Serial: "same", Transport: "virtio", Size: 1},
		{Name: "vdb", Serial: "same", WWID: "naa.1", Transport: "virtio", Size: 1},
		{Name: "vdc", Transport: "virtio", Size: 1},
		{Name: "sda", Serial: "odd*serial", WWID: "naa.2", Transport: "sata", Size: 1},
		{Name: "sdb", Serial: "a?b[c]", Transport: "sata", Size: 1},
	}

	for _, tc := range []struct {
		disk, want, wantErr string
	}{
		{disk: "vda", wantErr: "no serial or WWID of its own"}, // its serial is another disk's too
		{disk: "vdb", want: "wwid=naa.1"},
		{disk: "vdc", wantErr: "no serial or WWID of its own"},
		{disk: "sda", want: "wwid=naa.2"}, // Talos reads * in a serial as a glob
		{disk: "sdb", want: "serial=a?b[c]"},
	} {
		t.Run(tc.disk, func(t *testing.T) {
			t.Parallel()

			var d disksel.Disk

			for _, o := range disks {
				if o.Name == tc.disk {
					d = o
				}
			}

			id, err := disksel.IdentityOf(d, disks)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, id.String())

			// Characters other than * are themselves.
			got, err := id.Selector().Resolve(disks)
			require.NoError(t, err)
			assert.Equal(t, tc.disk, got.Name)
		})
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct{ selector, want string }{
		{"size>=lots", `size "lots": want a size`},
		{"colour=blue", `unknown key "colour"`},
		{"model>=A", "only size compares"},
		{"type=tape", "type=tape: want one of nvme, ssd, hdd, sd"},
		{"pick=fastest", "pick=fastest: want smallest or largest"},
		{"pick=smallest,pick=largest", "pick is given twice"},
		{"serial=a,serial=b", "serial is given twice"},
		{"size>=1GB,size>=2GB", "size is given twice"},
		{"serial=", "serial has no value"},
		{"nvme", `"nvme" is not key=value`},
		{"=nvme", `"=nvme" is not key=value`},
		{"type=nvme,,size>1GB", "an empty term"},
		{string(make([]byte, 2000)), "at most 1024"},
	} {
		t.Run(tc.selector, func(t *testing.T) {
			t.Parallel()

			_, err := disksel.Parse(tc.selector)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseKeepsText(t *testing.T) {
	t.Parallel()

	sel, err := disksel.Parse(" type=nvme , size>=400GB, pick=smallest ")
	require.NoError(t, err)
	assert.Equal(t, "type=nvme , size>=400GB, pick=smallest", sel.String())
	assert.False(t, sel.IsZero())

	zero, err := disksel.Parse("")
	require.NoError(t, err)
	assert.True(t, zero.IsZero())
	assert.True(t, zero.Matches(disksel.Disk{Name: "anything"}))

	var selErr *disksel.Error

	_, err = zero.Resolve(nil)
	assert.True(t, errors.As(err, &selErr))
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"type=nvme,size>=400GB,pick=smallest", "serial=a*", "size<1TiB", "bus=/pci*", "=", ">="} {
		f.Add(s)
	}

	disks := []disksel.Disk{{Name: "vda", Size: 1 << 30, Transport: "virtio", Serial: "x"}}

	f.Fuzz(func(t *testing.T, s string) {
		sel, err := disksel.Parse(s)
		if err != nil {
			return
		}

		// A parsed selector never panics when used.
		_, _ = sel.Resolve(disks) // only that it returns
	})
}
