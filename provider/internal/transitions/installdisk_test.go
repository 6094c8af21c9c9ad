package transitions_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// serverDisks are a server's disks: two NVMe of different sizes, a SATA SSD, two twin
// HDDs without a serial of their own, a CD-ROM.
var serverDisks = []resources.DiskInventory{
	{Name: "nvme0n1", Size: 960_197_124_096, Model: "SAMSUNG MZQL2960HCJR", Serial: "S64FNE0R801234", WWID: "eui.3634463052801234", Transport: "nvme"},
	{Name: "nvme1n1", Size: 3_840_755_982_336, Model: "SAMSUNG MZQL23T8HCLS", Serial: "S64HNE0T905678", WWID: "eui.3634483052905678", Transport: "nvme"},
	{Name: "sda", Size: 240_057_409_536, Model: "MTFDDAV240TDU", Serial: "2149331A4F1E", Transport: "sata"},
	{Name: "sdb", Size: 16_000_900_661_248, Model: "ST16000NM001G", Serial: "same", WWID: "naa.5000c500c9a1b2c3", Transport: "sas", Rotational: true},
	{Name: "sdc", Size: 16_000_900_661_248, Model: "ST16000NM001G", Serial: "same", Transport: "sas", Rotational: true},
	{Name: "sr0", Model: "Virtual CD", Transport: "usb", CDROM: true, Readonly: true},
}

// TestAllocateInstallDisk: the install disk selector resolves against the inventory to
// one disk named by a stable identity, shown by a dry run before anything is written;
// no disk, several, or one without an identity of its own refuse the allocation with
// the candidates listed.
func TestAllocateInstallDisk(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, selector, providerDefault string
		noInventory                     bool
		wantIdentity, wantDisk          string
		wantCode                        transitions.Code
		wantMsg                         []string
	}{
		{
			name: "the smallest NVMe of at least 400 GB", selector: "type=nvme,size>=400GB,pick=smallest",
			wantIdentity: "serial=S64FNE0R801234", wantDisk: "nvme0n1 (960 GB, transport nvme",
		},
		{
			name: "the provider's default", providerDefault: "transport=sata",
			wantIdentity: "serial=2149331A4F1E", wantDisk: "sda (240 GB",
		},
		{
			name: "the request's wins over the default", selector: "model=*23T8*", providerDefault: "transport=sata",
			wantIdentity: "serial=S64HNE0T905678",
		},
		{name: "none: the config chooses"},
		{
			name: "several NVMe", selector: "type=nvme", wantCode: transitions.CodeRefused,
			wantMsg: []string{"matches 2 disks", "nvme0n1 (960 GB", "nvme1n1 (3.8 TB", "pick=smallest"},
		},
		{
			name: "no disk", selector: "type=nvme,size>=8TB", wantCode: transitions.CodeRefused,
			wantMsg: []string{"matches none", "nvme0n1 (960 GB", "sdb (16 TB", "sda (240 GB"},
		},
		{name: "a twin's serial, its WWID", selector: "name=sdb", wantIdentity: "wwid=naa.5000c500c9a1b2c3"},
		{
			name: "no identity of its own", selector: "name=sdc", wantCode: transitions.CodeRefused,
			wantMsg: []string{"no serial or WWID of its own"},
		},
		{name: "a malformed selector", selector: "size>=big", wantCode: transitions.CodeInvalid, wantMsg: []string{`size "big"`}},
		{
			name: "no inventory yet", selector: "type=nvme", noInventory: true, wantCode: transitions.CodeRefused,
			wantMsg: []string{"has reported no inventory"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ctx := t.Context()
			st := openState(t)
			tr := transitions.New(st, transitions.Options{Recorder: &fakeRecorder{}, InstallDisk: tc.providerDefault})

			if !tc.noInventory {
				inv := resources.NewMachineInventory(machineID)
				inv.TypedSpec().Disks = serverDisks
				require.NoError(t, st.Create(ctx, inv))
			}

			_, err := tr.Accept(ctx, machineID, true)
			require.NoError(t, err)

			req := transitions.AllocationRequest{TalosVersion: "v1.12.0", InstallDisk: tc.selector, DryRun: true}

			dry, err := tr.Allocate(ctx, machineID, req)
			if len(tc.wantMsg) > 0 {
				assert.Equal(t, tc.wantCode, codeOf(err), "%v", err)

				for _, msg := range tc.wantMsg {
					assert.ErrorContains(t, err, msg)
				}

				assert.Nil(t, intentSpec(t, st).Allocation, "nothing allocated")

				return
			}

			require.NoError(t, err)
			assert.Nil(t, intentSpec(t, st).Allocation, "a dry run allocates nothing")

			req.DryRun = false

			spec, err := tr.Allocate(ctx, machineID, req)
			require.NoError(t, err)

			for _, got := range []*resources.Allocation{dry.Allocation, spec.Allocation} {
				if tc.wantIdentity == "" {
					assert.Nil(t, got.InstallDisk)

					continue
				}

				require.NotNil(t, got.InstallDisk)
				assert.Equal(t, tc.wantIdentity, got.InstallDisk.Identity)
				assert.Contains(t, got.InstallDisk.Disk, tc.wantDisk)
			}

			// The disk it installed to is the one the install-disk wipe scope wipes.
			spec, err = tr.Deallocate(ctx, machineID)
			require.NoError(t, err)
			assert.Equal(t, tc.wantIdentity, spec.InstallDisk)
		})
	}
}

// TestSetWipeScope: a scope and its keep selector are checked together.
func TestSetWipeScope(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	st := openState(t)
	tr := transitions.New(st, transitions.Options{})

	spec, err := tr.SetWipeScope(ctx, machineID, resources.WipeScopeAllExcept, "model=ST16000*")
	require.NoError(t, err)
	assert.Equal(t, "all-except", spec.WipeScope)
	assert.Equal(t, "model=ST16000*", spec.WipeKeep)

	for _, tc := range []struct{ scope, keep, want string }{
		{"all-except", "", "needs a selector of the disks to keep"},
		{"all", "model=X", "goes with the all-except scope"},
		{"some", "", `wipe scope "some" is not one of all, install-disk, all-except`},
		{"all-except", "colour=red", `unknown key "colour"`},
	} {
		_, err := tr.SetWipeScope(ctx, machineID, tc.scope, tc.keep)
		assert.Equal(t, transitions.CodeInvalid, codeOf(err), tc.scope)
		assert.ErrorContains(t, err, tc.want)
	}

	assert.Equal(t, "model=ST16000*", intentSpec(t, st).WipeKeep, "a refused change changes nothing")

	spec, err = tr.SetWipeScope(ctx, machineID, "", "")
	require.NoError(t, err)
	assert.Empty(t, spec.WipeScope, "back to the provider's")
}
