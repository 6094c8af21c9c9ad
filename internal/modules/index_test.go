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
	assert.Equal(t, Module{
		Name: "virtio_blk",
		Path: "kernel/drivers/block/virtio_blk.ko.xz",
		File: filepath.Join("testdata", "kernel/drivers/block/virtio_blk.ko.xz"),
		Deps: []string{"virtio", "virtio_ring"},
	}, got[len(got)-1])
}

func TestIndexModules(t *testing.T) {
	t.Parallel()

	ix := openFixture(t)

	var names []string
	for m := range ix.Modules() {
		names = append(names, m.Name)
	}

	require.Len(t, names, ix.Len())
	assert.Equal(t, []string{"virtio_pci", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_ring", "virtio"}, names[:5], "modules.dep order")
	assert.Equal(t, "crc32c_intel", names[len(names)-1])

	for _, tc := range []struct {
		name   string
		want   Module
		wantOK bool
	}{
		{
			name:   "net-failover",
			want:   Module{Name: "net_failover", Path: "kernel/drivers/net/net_failover.ko", File: filepath.Join("testdata", "kernel/drivers/net/net_failover.ko"), Deps: []string{"failover"}},
			wantOK: true,
		},
		{
			name:   "crc32c_intel",
			want:   Module{Name: "crc32c_intel", Path: "kernel/arch/x86/crypto/crc32c-intel.ko.zst", File: filepath.Join("testdata", "kernel/arch/x86/crypto/crc32c-intel.ko.zst")},
			wantOK: true,
		},
		{name: "nvme"}, // built in: not a loadable module
		{name: "ghost"},
	} {
		m, ok := ix.Module(tc.name)
		assert.Equal(t, tc.wantOK, ok, tc.name)
		assert.Equal(t, tc.want, m, tc.name)
	}
}

func TestIndexSoftdeps(t *testing.T) {
	t.Parallel()

	ix := openFixture(t)

	for _, tc := range []struct {
		module string
		want   []string
	}{
		{"ext4", []string{"crypto-crc32c"}},
		{"ipmi_msghandler", []string{"ipmi_devintf"}},
		{"virtio_blk", []string{"crc32c", "tun", "nothere"}},
		{"virtio-blk", []string{"crc32c", "tun", "nothere"}},
		{"virtio_net", nil},
	} {
		assert.Equal(t, tc.want, ix.Softdeps(tc.module), tc.module)
	}

	for _, tc := range []struct {
		target string
		want   []string
	}{
		{"tun", []string{"tun"}},
		{"curve25519-x86_64", []string{"curve25519_x86_64"}},
		{"crypto-crc32c", []string{"crc32c_generic", "crc32c_intel"}},
		{"crc32c", []string{"crc32c_intel"}},
		{"fs-ext4", nil}, // built in
		{"nothere", nil},
	} {
		assert.Equal(t, tc.want, ix.Resolve(tc.target), tc.target)
	}
}

func TestName(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"kernel/drivers/net/virtio_net.ko":                "virtio_net",
		"kernel/drivers/block/virtio_blk.ko.xz":           "virtio_blk",
		"kernel/arch/x86/crypto/curve25519-x86_64.ko.zst": "curve25519_x86_64",
		"kernel/drivers/usb/storage/usb-storage.ko":       "usb_storage",
		"kernel/lib/lib_c.ko.gz":                          "lib_c",
		"x.ko.zst":                                        "x",
		"snd-hda-intel":                                   "snd_hda_intel",
		"e1000e":                                          "e1000e",
		" tun ":                                           "tun",
		"nls_koi8-r.ko":                                   "nls_koi8_r",
	} {
		assert.Equal(t, want, Name(in), in)
	}
}

func TestOpenMissing(t *testing.T) {
	t.Parallel()

	_, err := Open(t.TempDir())
	assert.ErrorContains(t, err, "modules.dep")
}
