package wipe

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// bootMounts are the mount points that say where the running system came from: its root
// and the partitions its kernel is loaded from.
var bootMounts = map[string]bool{"/": true, "/boot": true, "/boot/efi": true, "/efi": true}

// BootDisks names the whole disks (kernel names) the running system booted from, read
// from mountinfo (/proc/self/mountinfo) and sysfs: the agent normally runs from an
// initramfs (device 0:N, no disk), but booted from a disk that disk must survive a wipe.
// Device-mapper and MD devices count through the disks under them (slaves).
func BootDisks(sysfsRoot string, mountinfo io.Reader) (map[string]bool, error) {
	disks := map[string]bool{}

	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 64<<10), 1<<20)

	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		f := strings.Fields(sc.Text())
		if len(f) < 5 || !bootMounts[f[4]] {
			continue
		}

		major, _, ok := strings.Cut(f[2], ":")
		if !ok {
			return nil, fmt.Errorf("error parsing mountinfo: device %q", f[2])
		}

		if major == "0" {
			// rootfs, tmpfs, overlay: no block device.
			continue
		}

		if err := diskOf(sysfsRoot, f[2], disks, 0); err != nil {
			return nil, fmt.Errorf("error finding the disk of %s (device %s): %w", f[4], f[2], err)
		}
	}

	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("error reading mountinfo: %w", err)
	}

	return disks, nil
}

// diskOf adds the whole disks behind block device devNo ("8:1") to disks.
func diskOf(sysfsRoot, devNo string, disks map[string]bool, depth int) error {
	if depth > 8 {
		return fmt.Errorf("device %s: stacked too deep", devNo)
	}

	dir, err := filepath.EvalSymlinks(filepath.Join(sysfsRoot, "dev", "block", devNo))
	if err != nil {
		return err
	}

	// A partition's directory lies in its disk's.
	if _, err = os.Stat(filepath.Join(dir, "partition")); err == nil {
		dir = filepath.Dir(dir)
	}

	slaves, err := os.ReadDir(filepath.Join(dir, "slaves"))
	if err != nil || len(slaves) == 0 {
		disks[filepath.Base(dir)] = true

		return nil //nolint:nilerr // no slaves directory: a disk
	}

	for _, s := range slaves {
		dev := strings.TrimSpace(readTrimmed(filepath.Join(dir, "slaves", s.Name(), "dev")))
		if dev == "" {
			return fmt.Errorf("no device number for %s under %s", s.Name(), filepath.Base(dir))
		}

		if err = diskOf(sysfsRoot, dev, disks, depth+1); err != nil {
			return err
		}
	}

	return nil
}

// Removable says whether the disk called name is removable media and what kind: the
// kernel's removable flag (USB sticks, card readers), disks on USB, and SD cards (which
// the MMC driver does not flag removable). transport is the inventory's ("usb", "mmc").
func Removable(sysfsRoot, name, transport string) (bool, string) {
	dir := filepath.Join(sysfsRoot, "block", name)

	switch {
	case readTrimmed(filepath.Join(dir, "removable")) == "1":
		return true, "flagged removable"
	case transport == "usb":
		return true, "on USB"
	case transport == "mmc" && readTrimmed(filepath.Join(dir, "device", "type")) == "SD":
		return true, "an SD card"
	}

	return false, ""
}
