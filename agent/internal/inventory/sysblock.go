package inventory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	blkdev "github.com/siderolabs/go-blockdevice/v2/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"go.uber.org/zap"
)

// Kernel block majors that are not disks a machine owner cares about.
const (
	majorRAM   = 1
	majorLoop  = 7
	majorSCSIC = 11 // SCSI CD-ROM (sr*)
)

// SysBlockDisks lists whole disks from sysfsRoot/block, reading the same
// attributes go-blockdevice reads, rooted so that tests can use a fixture.
// With devRoot set, CD-ROMs are opened to tell an empty tray (size 0).
// A disk whose files vanish mid-read is skipped.
func SysBlockDisks(ctx context.Context, logger *zap.Logger, sysfsRoot, devRoot string) ([]Disk, error) {
	dir := filepath.Join(sysfsRoot, "block")

	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}

		return nil, fmt.Errorf("error scanning block devices: %w", err)
	}

	disks := make([]Disk, 0, len(entries))

	for _, entry := range entries {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}

		disk, ok, err := readSysBlockDisk(sysfsRoot, devRoot, entry.Name())
		if err != nil {
			logger.Debug("skipping block device", zap.String("device", entry.Name()), zap.Error(err))

			continue
		}

		if ok {
			disks = append(disks, disk)
		}
	}

	return disks, nil
}

// readSysBlockDisk reads one device; ok is false for what is not a disk.
func readSysBlockDisk(sysfsRoot, devRoot, name string) (Disk, bool, error) {
	path := filepath.Join(sysfsRoot, "block", name)

	devNo, err := os.ReadFile(filepath.Join(path, "dev"))
	if err != nil {
		return Disk{}, false, fmt.Errorf("error reading device number: %w", err)
	}

	majorStr, _, _ := strings.Cut(strings.TrimSpace(string(devNo)), ":")

	major, err := strconv.Atoi(majorStr)
	if err != nil {
		return Disk{}, false, fmt.Errorf("error parsing device number %q: %w", devNo, err)
	}

	if major == majorRAM || major == majorLoop {
		return Disk{}, false, nil
	}

	sizeStr, err := os.ReadFile(filepath.Join(path, "size"))
	if err != nil {
		return Disk{}, false, fmt.Errorf("error reading size: %w", err)
	}

	sectors, err := strconv.ParseUint(strings.TrimSpace(string(sizeStr)), 10, 64)
	if err != nil {
		return Disk{}, false, fmt.Errorf("error parsing size %q: %w", sizeStr, err)
	}

	isCD := major == majorSCSIC || readString(filepath.Join(path, "device", "type")) == "5"
	size := sectors * 512 // sysfs counts 512-byte sectors whatever the disk's sector size

	if isCD && devRoot != "" && cdNoMedia(filepath.Join(devRoot, name)) {
		// Linux reports a size for an empty tray too.
		size = 0
	}

	if size == 0 && !isCD {
		return Disk{}, false, nil
	}

	spec := block.DiskSpec{
		DevPath:    "/dev/" + name,
		IOSize:     uint(readUint(filepath.Join(path, "queue", "minimum_io_size"))),
		SectorSize: uint(readUint(filepath.Join(path, "queue", "logical_block_size"))),
		Readonly:   readString(filepath.Join(path, "ro")) == "1",
		CDROM:      isCD,
		Model:      readString(filepath.Join(path, "device", "model")),
		Serial:     firstNonEmpty(path, "serial", "device/serial"),
		Modalias:   firstNonEmpty(path, "device/modalias", "device/device/modalias"),
		WWID:       firstNonEmpty(path, "wwid", "device/wwid"),
		UUID:       firstNonEmpty(path, "uuid", "device/uuid"),
		Rotational: readString(filepath.Join(path, "queue", "rotational")) == "1",
		Transport:  transport(sysfsRoot, path, name),
	}

	spec.SetSize(size)

	if spec.Transport == "nvme" {
		spec.FirmwareVersion = readString(filepath.Join(path, "device", "firmware_rev"))
	}

	if target, err := os.Readlink(path); err == nil {
		// ../devices/pci0000:00/0000:00:04.0/virtio1/block/vda → /pci0000:00/0000:00:04.0/virtio1
		spec.BusPath = filepath.Dir(filepath.Dir(strings.TrimPrefix(target, "../devices")))
	}

	if subsystem, err := filepath.EvalSymlinks(filepath.Join(path, "subsystem")); err == nil {
		if rel, err := filepath.Rel(sysfsRoot, subsystem); err == nil {
			spec.SubSystem = filepath.Join("/sys", rel)
		}
	}

	return Disk{ID: name, Spec: spec}, true, nil
}

// transport names the bus as go-blockdevice does: by kernel name, else by
// the SCSI host behind the device.
func transport(sysfsRoot, path, name string) string {
	for prefix, t := range map[string]string{"nvme": "nvme", "vd": "virtio", "xvd": "xenblk", "mmcblk": "mmc", "dm-": "dm"} {
		if strings.HasPrefix(name, prefix) {
			return t
		}
	}

	hctl := linkBase(filepath.Join(path, "device")) // "0:0:0:0"

	hostStr, _, ok := strings.Cut(hctl, ":")
	if !ok {
		return ""
	}

	host := "host" + hostStr
	hostIs := func(typ string) bool {
		st, err := os.Stat(filepath.Join(sysfsRoot, "class", typ+"_host", host))

		return err == nil && st.IsDir()
	}

	switch {
	case hostIs("fc"):
		return "fc"
	case hostIs("sas"):
		return "sas"
	case hostIs("iscsi"):
		return "iscsi"
	}

	if target, err := os.Readlink(filepath.Join(sysfsRoot, "bus", "scsi", "devices", hctl)); err == nil && strings.Contains(target, "usb") {
		return "usb"
	}

	switch procName := readString(filepath.Join(sysfsRoot, "class", "scsi_host", host, "proc_name")); {
	case procName == "ahci", procName == "sata":
		return "sata"
	case strings.Contains(procName, "ata"):
		return "ata"
	case procName == "virtio_scsi":
		return "virtio"
	default:
		return procName
	}
}

// cdNoMedia asks the drive whether a medium is in.
func cdNoMedia(devPath string) bool {
	bd, err := blkdev.NewFromPath(devPath)
	if err != nil {
		return false
	}

	defer bd.Close()

	return bd.IsCDNoMedia()
}

func readUint(path string) uint64 {
	v, err := strconv.ParseUint(readString(path), 10, 64)
	if err != nil {
		return 0
	}

	return v
}

func firstNonEmpty(dir string, names ...string) string {
	for _, name := range names {
		if v := readString(filepath.Join(dir, name)); v != "" {
			return v
		}
	}

	return ""
}
