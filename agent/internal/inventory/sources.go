// Package inventory reports what the machine is as Talos machinery resources
// (hardware, block, network, and the kernel command line and platform metadata
// of runtime) kept in a COSI state by Talos-style controllers.
package inventory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/go-smbios/smbios"
	"go.uber.org/zap"
)

// DefaultInterval is how often sources that change at runtime (disks, links,
// addresses, routes, PCI hot-plug, hostname) are read again.
const DefaultInterval = 5 * time.Second

// Sources says where the inventory is read from. The zero value reads the
// running machine; tests and runs outside an initramfs point it elsewhere.
type Sources struct {
	// SysfsRoot is where sysfs is mounted (default /sys).
	SysfsRoot string
	// ProcRoot is where procfs is mounted (default /proc).
	ProcRoot string
	// DevRoot holds the device nodes opened for what sysfs cannot tell
	// (a CD-ROM's media); empty skips opening devices.
	DevRoot string
	// SMBIOS returns the raw SMBIOS structure table and its version
	// (default: SysfsRoot/firmware/dmi/tables).
	SMBIOS func() ([]byte, smbios.Version, error)
	// Netlink opens the netlink source for links, addresses and routes
	// (default: rtnetlink in the agent's own network namespace).
	Netlink func() (Netlink, error)
	// Disks lists whole disks (default: SysBlockDisks over SysfsRoot).
	Disks func(ctx context.Context, logger *zap.Logger) ([]Disk, error)
	// Hostname returns the kernel hostname (default os.Hostname).
	Hostname func() (string, error)
	// Interval between reads of changing sources (default DefaultInterval).
	Interval time.Duration
}

// Netlink lists the kernel's network state; rtnetlink is the real one.
type Netlink interface {
	Links() ([]rtnetlink.LinkMessage, error)
	Addresses() ([]rtnetlink.AddressMessage, error)
	Routes() ([]rtnetlink.RouteMessage, error)
	Close() error
}

// withDefaults fills what the caller left empty.
func (src Sources) withDefaults() Sources {
	if src.SysfsRoot == "" {
		src.SysfsRoot = "/sys"
	}

	if src.ProcRoot == "" {
		src.ProcRoot = "/proc"
	}

	if src.SMBIOS == nil {
		src.SMBIOS = SMBIOSFromSysfs(src.SysfsRoot)
	}

	if src.Netlink == nil {
		src.Netlink = func() (Netlink, error) { return DialNetlink(nil) }
	}

	if src.Disks == nil {
		sysfs, dev := src.SysfsRoot, src.DevRoot

		src.Disks = func(ctx context.Context, logger *zap.Logger) ([]Disk, error) {
			return SysBlockDisks(ctx, logger, sysfs, dev)
		}
	}

	if src.Hostname == nil {
		src.Hostname = os.Hostname
	}

	if src.Interval <= 0 {
		src.Interval = DefaultInterval
	}

	return src
}

// DefaultSources reads the running machine, opening /dev for CD-ROM media.
func DefaultSources() Sources {
	return Sources{DevRoot: "/dev"}.withDefaults()
}

// SMBIOSFromSysfs reads the table the kernel exports under
// sysfsRoot/firmware/dmi/tables, as go-smbios does on Linux.
func SMBIOSFromSysfs(sysfsRoot string) func() ([]byte, smbios.Version, error) {
	return func() ([]byte, smbios.Version, error) {
		dir := filepath.Join(sysfsRoot, "firmware", "dmi", "tables")

		table, err := os.ReadFile(filepath.Join(dir, "DMI"))
		if err != nil {
			return nil, smbios.Version{}, fmt.Errorf("error reading SMBIOS table: %w", err)
		}

		ep, err := os.ReadFile(filepath.Join(dir, "smbios_entry_point"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, smbios.Version{}, fmt.Errorf("error reading SMBIOS entry point: %w", err)
		}

		return table, entryPointVersion(ep), nil
	}
}

// SMBIOSFile reads a raw table dump (a .dmi file) and assumes SMBIOS 3.3,
// which only matters for the byte order of UUIDs from firmware older than 2.6.
func SMBIOSFile(path string) func() ([]byte, smbios.Version, error) {
	return func() ([]byte, smbios.Version, error) {
		table, err := os.ReadFile(path)
		if err != nil {
			return nil, smbios.Version{}, fmt.Errorf("error reading SMBIOS dump: %w", err)
		}

		return table, smbios.Version{Major: 3, Minor: 3}, nil
	}
}

// entryPointVersion reads the version from a 32-bit ("_SM_") or 64-bit
// ("_SM3_") entry point; anything else is taken as 3.3.
func entryPointVersion(ep []byte) smbios.Version {
	switch {
	case len(ep) >= 10 && string(ep[:5]) == "_SM3_":
		return smbios.Version{Major: int(ep[7]), Minor: int(ep[8]), Revision: int(ep[9])}
	case len(ep) >= 8 && string(ep[:4]) == "_SM_":
		return smbios.Version{Major: int(ep[6]), Minor: int(ep[7])}
	default:
		return smbios.Version{Major: 3, Minor: 3}
	}
}

// smbiosLoader reads and decodes SMBIOS once for all controllers that use it:
// the table does not change while the machine runs.
type smbiosLoader struct {
	read func() ([]byte, smbios.Version, error)

	once sync.Once
	info *smbios.SMBIOS
	err  error
}

func (l *smbiosLoader) load(logger *zap.Logger) (*smbios.SMBIOS, error) {
	l.once.Do(func() {
		table, version, err := l.read()
		if err != nil {
			l.err = err

			return
		}

		l.info, l.err = decodeSMBIOS(table, version, logger)
	})

	return l.info, l.err
}

// decodeSMBIOS decodes the longest prefix of whole structures, so a truncated
// or corrupt table still yields what precedes the damage. It never panics:
// this runs in PID 1.
func decodeSMBIOS(table []byte, version smbios.Version, logger *zap.Logger) (info *smbios.SMBIOS, err error) {
	defer func() {
		if p := recover(); p != nil {
			info, err = nil, fmt.Errorf("error decoding SMBIOS: panic: %v", p)
		}
	}()

	whole := wholeStructures(table)
	if whole < len(table) {
		logger.Warn("SMBIOS table is truncated or corrupt, decoding what precedes the damage",
			zap.Int("usable_bytes", whole), zap.Int("total_bytes", len(table)))
	}

	info, err = smbios.Decode(bytes.NewReader(table[:whole]), version)
	if err != nil {
		return nil, fmt.Errorf("error decoding SMBIOS: %w", err)
	}

	return info, nil
}

// wholeStructures returns the length of the prefix of table made of complete
// structures (header, formatted area, string set ending in two NULs), up to
// and including the end-of-table structure.
func wholeStructures(table []byte) int {
	const (
		headerLen  = 4
		endOfTable = 127
	)

	good := 0

	for off := 0; off+headerLen <= len(table); {
		typ, length := table[off], int(table[off+1])
		if length < headerLen || off+length > len(table) {
			break
		}

		end := -1

		for i := off + length; i+1 < len(table); i++ {
			if table[i] == 0 && table[i+1] == 0 {
				end = i + 2

				break
			}
		}

		if end < 0 {
			break
		}

		off, good = end, end

		if typ == endOfTable {
			break
		}
	}

	return good
}
