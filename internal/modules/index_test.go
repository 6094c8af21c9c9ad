package modules

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func openFixture(t *testing.T) *Index {
	t.Helper()

	ix, err := Open("testdata")
	require.NoError(t, err)

	return ix
}

func TestIndexMatch(t *testing.T) {
	t.Parallel()

	ix := openFixture(t)

	for _, tc := range []struct {
		modalias string
		want     []string
	}{
		{"pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", []string{"virtio_pci"}},
		{"virtio:d00000001v00001AF4", []string{"virtio_net"}},
		{"virtio:d00000002v00001AF4", []string{"virtio_blk"}},
		{"pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01", []string{"ahci"}},
		{"pci:v00001AF4d00001042sv00001AF4sd00001100bc01sc08i02", []string{"virtio_pci", "nvme"}},
		{"acpi:IPI0001:", []string{"ipmi_si"}},
		{"usb:v0BDAp8152d3000dc00dsc00dp00icFFisc00ip00in00", []string{"r8152"}},
		{"usb:v0BDAp8152d1000dc00dsc00dp00icFFisc00ip00in00", nil},
		{"usb:v0BDAp8153d0000dc00dsc00dp00icFFisc00ip00in00", nil},
		{"usb:v0BDAp8153d1000dc00dsc00dp00icFFisc00ip00in00", []string{"r8153_ecm"}},
		{"dmi:bvnSeaBIOS:svnQEMU:pnStandard/weird PC:", []string{"qemu_dmi"}},
		{"fs-ext4", []string{"ext4"}},
		{"pci:v000010ECd00008139sv*", nil},
		{"", nil},
		{"no-colon-at-all", nil},
	} {
		assert.Equal(t, tc.want, ix.Match(tc.modalias), tc.modalias)
	}
}

func TestIndexClosure(t *testing.T) {
	t.Parallel()

	ix := openFixture(t)

	names := func(ms []Module) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}

		return out
	}

	for _, tc := range []struct {
		module  string
		want    []string
		wantErr error
	}{
		{module: "virtio_net", want: []string{"virtio_ring", "virtio", "failover", "net_failover", "virtio_net"}},
		{module: "virtio-net", want: []string{"virtio_ring", "virtio", "failover", "net_failover", "virtio_net"}},
		{module: "e1000e", want: []string{"pps_core", "ptp", "e1000e"}},
		// scsi_mod is built in: left out.
		{module: "ahci", want: []string{"libata", "libahci", "ahci"}},
		{module: "wireguard", want: []string{"curve25519_x86_64", "udp_tunnel", "ip6_udp_tunnel", "wireguard"}},
		{module: "nvme", want: nil},
		{module: "ghost", wantErr: ErrUnknownModule},
		{module: "needs_ghost", wantErr: ErrUnknownModule},
		{module: "a", wantErr: errors.New("cycle")},
	} {
		got, err := ix.Closure(tc.module)
		if tc.wantErr != nil {
			require.Error(t, err, tc.module)

			if errors.Is(tc.wantErr, ErrUnknownModule) {
				assert.ErrorIs(t, err, ErrUnknownModule, tc.module)
			} else {
				assert.Contains(t, err.Error(), tc.wantErr.Error(), tc.module)
			}

			continue
		}

		require.NoError(t, err, tc.module)
		assert.Equal(t, tc.want, names(got), tc.module)
	}

	got, err := ix.Closure("virtio_blk")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join("testdata", "kernel/drivers/block/virtio_blk.ko.xz"), got[len(got)-1].Path)
}

func TestName(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"kernel/drivers/net/virtio_net.ko":                "virtio_net",
		"kernel/drivers/block/virtio_blk.ko.xz":           "virtio_blk",
		"kernel/arch/x86/crypto/curve25519-x86_64.ko.zst": "curve25519_x86_64",
		"snd-hda-intel": "snd_hda_intel",
		" tun ":         "tun",
	} {
		assert.Equal(t, want, Name(in), in)
	}
}

func TestOpenMissing(t *testing.T) {
	t.Parallel()

	_, err := Open(t.TempDir())
	require.Error(t, err)
}
