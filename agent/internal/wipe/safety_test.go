package wipe_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
)

// sysfsTree builds a sysfs fixture: devices/<path> directories with a dev file, a
// partition marker where the name says so, slaves links, block/<disk> and dev/block links.
func sysfsTree(t *testing.T, devices map[string]string, slaves map[string][]string) string {
	t.Helper()

	root := t.TempDir()
	byName := map[string]string{}

	for path, devNo := range devices {
		dir := filepath.Join(root, "devices", path)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "dev"), []byte(devNo+"\n"), 0o644))

		name := filepath.Base(path)
		byName[name] = dir

		if _, isPart := devices[filepath.Dir(path)]; isPart {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "partition"), []byte("1\n"), 0o644))
		} else {
			require.NoError(t, os.MkdirAll(filepath.Join(root, "block"), 0o755))
			require.NoError(t, os.Symlink(dir, filepath.Join(root, "block", name)))
		}

		require.NoError(t, os.MkdirAll(filepath.Join(root, "dev", "block"), 0o755))
		require.NoError(t, os.Symlink(dir, filepath.Join(root, "dev", "block", devNo)))
	}

	for holder, under := range slaves {
		require.NoError(t, os.MkdirAll(filepath.Join(byName[holder], "slaves"), 0o755))

		for _, u := range under {
			require.NoError(t, os.Symlink(byName[u], filepath.Join(byName[holder], "slaves", u)))
		}
	}

	return root
}

func TestBootDisks(t *testing.T) {
	t.Parallel()

	devices := map[string]string{
		"pci0000:00/0000:00:04.0/virtio1/block/vda":            "253:0",
		"pci0000:00/0000:00:04.0/virtio1/block/vda/vda1":       "253:1",
		"pci0000:00/0000:00:04.0/virtio1/block/vda/vda2":       "253:2",
		"pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1":           "259:0",
		"pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1/nvme0n1p1": "259:1",
		"pci0000:00/0000:00:1f.2/ata1/block/sda":               "8:0",
		"pci0000:00/0000:00:1f.2/ata2/block/sdb":               "8:16",
		"virtual/block/dm-0":                                   "254:0",
		"virtual/block/md0":                                    "9:0",
	}

	root := sysfsTree(t, devices, map[string][]string{"dm-0": {"md0"}, "md0": {"sda", "sdb"}})

	for _, tc := range []struct {
		name      string
		mountinfo string
		want      []string
	}{
		{"initramfs", "1 0 0:2 / / rw - rootfs rootfs rw\n22 1 0:21 / /proc rw - proc proc rw\n", nil},
		{"root on a partition", "1 0 253:2 / / rw,relatime - ext4 /dev/vda2 rw\n", []string{"vda"}},
		{"boot partition elsewhere", "1 0 0:2 / / rw - tmpfs tmpfs rw\n30 1 253:1 / /boot rw - vfat /dev/vda1 rw\n", []string{"vda"}},
		{"EFI partition on NVMe", "1 0 0:2 / / rw - rootfs rootfs rw\n31 1 259:1 / /boot/efi rw - vfat /dev/nvme0n1p1 rw\n", []string{"nvme0n1"}},
		{"root on a whole disk", "1 0 8:16 / / rw - ext4 /dev/sdb rw\n", []string{"sdb"}},
		{"root on LVM over RAID", "1 0 254:0 / / rw - xfs /dev/mapper/vg-root rw\n", []string{"sda", "sdb"}},
		{"other mounts do not count", "1 0 0:2 / / rw - rootfs rootfs rw\n40 1 253:2 / /mnt rw - ext4 /dev/vda2 rw\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			disks, err := wipe.BootDisks(root, strings.NewReader(tc.mountinfo))
			require.NoError(t, err)

			var got []string
			for d := range disks {
				got = append(got, d)
			}

			assert.ElementsMatch(t, tc.want, got)
		})
	}

	_, err := wipe.BootDisks(root, strings.NewReader("1 0 8:99 / / rw - ext4 /dev/sdz rw\n"))
	assert.ErrorContains(t, err, "error finding the disk of / (device 8:99)")

	_, err = wipe.BootDisks(root, strings.NewReader("1 0 garbage / / rw - ext4 /dev/sdz rw\n"))
	assert.ErrorContains(t, err, `error parsing mountinfo: device "garbage"`)
}

func TestRemovable(t *testing.T) {
	t.Parallel()

	root := t.TempDir()

	for name, files := range map[string]map[string]string{
		"sda":     {"removable": "0"},
		"sdb":     {"removable": "1"},
		"sdc":     {"removable": "0"},
		"mmcblk0": {"removable": "0", "device/type": "SD"},
		"mmcblk1": {"removable": "0", "device/type": "MMC"},
	} {
		for f, content := range files {
			p := filepath.Join(root, "block", name, f)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte(content+"\n"), 0o644))
		}
	}

	for _, tc := range []struct {
		name, transport string
		want            bool
		why             string
	}{
		{"sda", "sata", false, ""},
		{"sdb", "usb", true, "flagged removable"},
		{"sdc", "usb", true, "on USB"},
		{"mmcblk0", "mmc", true, "an SD card"},
		{"mmcblk1", "mmc", false, ""}, // eMMC soldered on the board
	} {
		removable, why := wipe.Removable(root, tc.name, tc.transport)
		assert.Equal(t, tc.want, removable, tc.name)
		assert.Equal(t, tc.why, why, tc.name)
	}
}
