package modules

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// writeDevice makes a fake sysfs device directory holding a modalias file.
func writeDevice(t *testing.T, root, dir, modalias string) {
	t.Helper()

	d := filepath.Join(root, dir)
	require.NoError(t, os.MkdirAll(d, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(d, "modalias"), []byte(modalias+"\n"), 0o644))
}

func TestModaliases(t *testing.T) {
	t.Parallel()

	root := t.TempDir()
	writeDevice(t, root, "pci0000:00/0000:00:02.0", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00")
	writeDevice(t, root, "pci0000:00/0000:00:03.0", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00")
	writeDevice(t, root, "platform/serial8250", "platform:serial8250")
	writeDevice(t, root, "platform/empty", "")
	// A symlink loop, as sysfs has (subsystem, driver): must not be followed.
	require.NoError(t, os.Symlink(root, filepath.Join(root, "pci0000:00", "subsystem")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "pci0000:00", "uevent"), []byte("x"), 0o644))

	got, err := Modaliases(root)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00",
		"platform:serial8250",
	}, got)

	got, err = Modaliases(filepath.Join(root, "missing"))
	require.NoError(t, err)
	assert.Empty(t, got)
}

// recorder is a Loader that records what it would load; loading a module
// named in plug creates the devices a real bus driver would.
type recorder struct {
	loaded []string
	exists map[string]bool
	broken map[string]bool
	plug   map[string]func()
}

func (r *recorder) Load(m Module) error {
	if _, err := os.Stat(filepath.Dir(m.File)); err == nil {
		return fmt.Errorf("fixture path %s should not exist", m.File)
	}

	if r.exists[m.Name] {
		return fmt.Errorf("finit_module %s: %w", m.File, unix.EEXIST)
	}

	if r.broken[m.Name] {
		return fmt.Errorf("finit_module %s: %w", m.File, unix.ENOEXEC)
	}

	r.loaded = append(r.loaded, m.Name)

	if fn := r.plug[m.Name]; fn != nil {
		fn()
	}

	return nil
}

func TestLoad(t *testing.T) {
	t.Parallel()

	ix := openFixture(t)

	type result struct {
		loaded  []string
		already []string
		failed  []string
		rounds  int
	}

	for _, tc := range []struct {
		name    string
		devices map[string]string
		always  []string
		skip    []string
		exists  []string
		broken  []string
		want    result
	}{
		{
			name: "qemu virtio: the bus driver's devices load in round two",
			devices: map[string]string{
				"pci0000:00/0000:00:02.0": "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00",
				"pci0000:00/0000:00:1f.2": "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01",
				"pci0000:00/0000:00:04.0": "pci:v00001AF4d00001042sv00001AF4sd00001100bc01sc08i02",
			},
			want: result{
				loaded: []string{
					// round 1, modaliases sorted: 0x1AF4 (virtio_pci, nvme built in), 0x8086 (ahci)
					"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
					"libata", "libahci", "ahci",
					// round 2: virtio_pci made virtio0 and virtio1
					"failover", "net_failover", "virtio_net", "virtio_blk",
				},
				rounds: 3,
			},
		},
		{
			name:   "always, each module once, already loaded ignored",
			always: []string{"ipmi_msghandler", "ipmi_devintf", "ipmi_si", "tun", "wireguard", "tun"},
			devices: map[string]string{
				"LNXSYSTM:00/IPI0001:00": "acpi:IPI0001:",
			},
			exists: []string{"tun"},
			want: result{
				loaded:  []string{"ipmi_msghandler", "ipmi_devintf", "ipmi_si", "curve25519_x86_64", "udp_tunnel", "ip6_udp_tunnel", "wireguard"},
				already: []string{"tun"},
				rounds:  2,
			},
		},
		{
			name:   "failures are recorded, the rest loads",
			always: []string{"ghost", "e1000e", "tun"},
			broken: []string{"pps_core"},
			devices: map[string]string{
				"pci0000:00/0000:00:19.0": "pci:v00008086d000010D3sv00008086sd00000000bc02sc00i00",
			},
			want: result{
				loaded: []string{"tun"},
				failed: []string{"ghost", "pps_core", "e1000e"},
				rounds: 2,
			},
		},
		{
			name:   "skip",
			always: []string{"tun", "wireguard"},
			skip:   []string{"wireguard", "udp_tunnel"},
			want:   result{loaded: []string{"tun"}, rounds: 2},
		},
		{
			name: "nothing to do",
			want: result{rounds: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			root := t.TempDir()
			for dir, alias := range tc.devices {
				writeDevice(t, root, dir, alias)
			}

			set := func(names []string) map[string]bool {
				m := map[string]bool{}
				for _, n := range names {
					m[n] = true
				}

				return m
			}

			rec := &recorder{
				exists: set(tc.exists),
				broken: set(tc.broken),
				plug: map[string]func(){
					"virtio_pci": func() {
						writeDevice(t, root, "pci0000:00/0000:00:02.0/virtio0", "virtio:d00000001v00001AF4")
						writeDevice(t, root, "pci0000:00/0000:00:04.0/virtio1", "virtio:d00000002v00001AF4")
					},
				},
			}

			res, err := Load(context.Background(), Options{
				Index:   ix,
				Devices: root,
				Always:  tc.always,
				Skip:    tc.skip,
				Loader:  rec,
			})
			require.NoError(t, err)

			var failed []string
			for _, f := range res.Failed {
				failed = append(failed, f.Name)
			}

			assert.Equal(t, tc.want.loaded, rec.loaded, "load order")
			assert.Len(t, res.Loaded, len(tc.want.loaded))
			assert.Equal(t, tc.want.already, res.Already)
			assert.Equal(t, tc.want.failed, failed)
			assert.Equal(t, tc.want.rounds, res.Rounds)
		})
	}
}

func TestLoadCanceled(t *testing.T) {
	t.Parallel()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	_, err := Load(ctx, Options{Index: openFixture(t), Devices: t.TempDir(), Loader: &recorder{}})
	require.ErrorIs(t, err, context.Canceled)
}

func TestLoadRoundsBounded(t *testing.T) {
	t.Parallel()

	// Each load plugs a device wanting a module not yet loaded: the
	// rescans must stop at MaxRounds.
	root := t.TempDir()
	writeDevice(t, root, "d0", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00")

	chain := []string{"virtio:d00000001v1", "virtio:d00000002v1", "acpi:IPI0001:", "pci:v00008086d0000100Esv0sd0bc02sc00i00"}
	n := 0
	rec := &recorder{plug: map[string]func(){}}
	for _, m := range []string{"virtio_pci", "virtio_net", "virtio_blk", "ipmi_si"} {
		rec.plug[m] = func() {
			writeDevice(t, root, fmt.Sprintf("d%d", n+1), chain[n])
			n++
		}
	}

	start := time.Now()
	res, err := Load(context.Background(), Options{Index: openFixture(t), Devices: root, Loader: rec, MaxRounds: 3})
	require.NoError(t, err)
	assert.Equal(t, 3, res.Rounds)
	assert.NotContains(t, rec.loaded, "ipmi_si")
	assert.Less(t, time.Since(start), time.Second)
}
