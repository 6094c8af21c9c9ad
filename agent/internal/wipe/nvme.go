package wipe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// NVMe admin commands and fields (NVM Express Base Specification 2.0: Identify, Format NVM).
const (
	nvmeOpIdentify  = 0x06
	nvmeOpFormatNVM = 0x80

	nvmeCNSNamespace  = 0x00
	nvmeCNSController = 0x01
	nvmeIdentifySize  = 4096

	nvmeOACSFormat        = 1 << 1 // Optional Admin Command Support: Format NVM
	nvmeFNAAllNamespaces  = 1 << 0 // Format NVM Attributes: a format applies to every namespace
	nvmeFNAEraseAllNS     = 1 << 1 // a secure erase applies to every namespace
	nvmeFNACryptoSupports = 1 << 2 // cryptographic erase is supported

	nvmeSESUserData = 1
	nvmeSESCrypto   = 2

	nvmeDLFEATReadZeroes = 0x1 // deallocated blocks read as zeroes

	// A user data erase rewrites the whole drive; large, slow drives take hours. The
	// ioctl cannot be cancelled once sent, so the bound is the kernel's, not ctx's.
	nvmeFormatTimeout   = 4 * time.Hour
	nvmeIdentifyTimeout = 30 * time.Second

	// _IO('N', 0x40) and _IOWR('N', 0x41, struct nvme_passthru_cmd) of linux/nvme_ioctl.h.
	nvmeIoctlID       = 0x4e40
	nvmeIoctlAdminCmd = 0xc0484e41
)

// nvmeCommand is struct nvme_passthru_cmd (72 bytes).
type nvmeCommand struct {
	Opcode      uint8
	Flags       uint8
	Rsvd1       uint16
	NSID        uint32
	CDW2, CDW3  uint32
	Metadata    uint64
	Addr        uint64
	MetadataLen uint32
	DataLen     uint32
	CDW10       uint32
	CDW11       uint32
	CDW12       uint32
	CDW13       uint32
	CDW14       uint32
	CDW15       uint32
	TimeoutMs   uint32
	Result      uint32
}

// nvmeDevice is an NVMe namespace's admin passthrough; tests fake it.
type nvmeDevice interface {
	namespaceID() (uint32, error)
	// admin runs cmd with data as its buffer (Addr and DataLen are filled in).
	admin(cmd *nvmeCommand, data []byte) error
}

// nvmeStatusError is a command the controller completed with an error status.
type nvmeStatusError struct {
	op     string
	status uint32
}

func (e *nvmeStatusError) Error() string {
	sct, sc := (e.status>>8)&0x7, e.status&0xff

	what := ""

	if sct == 0 {
		switch sc {
		case 0x01:
			what = ": invalid command opcode"
		case 0x02:
			what = ": invalid field in command"
		case 0x0b:
			what = ": invalid namespace or format"
		}
	} else if sct == 1 && sc == 0x0a {
		what = ": invalid format"
	}

	return fmt.Sprintf("NVMe %s failed with status type %#x code %#x%s", e.op, sct, sc, what)
}

type nvmeController struct {
	oacs   uint16
	fna    uint8
	model  string
	serial string
}

func parseIdentifyController(b []byte) (nvmeController, error) {
	if len(b) < nvmeIdentifySize {
		return nvmeController{}, fmt.Errorf("identify controller data is %d bytes, want %d", len(b), nvmeIdentifySize)
	}

	return nvmeController{
		serial: strings.TrimSpace(string(b[4:24])),
		model:  strings.TrimSpace(string(b[24:64])),
		oacs:   binary.LittleEndian.Uint16(b[256:258]),
		fna:    b[524],
	}, nil
}

type nvmeNamespace struct {
	size   uint64 // in logical blocks
	flbas  uint8  // formatted LBA size: format index, metadata placement
	dps    uint8  // end-to-end protection settings
	dlfeat uint8
}

func parseIdentifyNamespace(b []byte) (nvmeNamespace, error) {
	if len(b) < nvmeIdentifySize {
		return nvmeNamespace{}, fmt.Errorf("identify namespace data is %d bytes, want %d", len(b), nvmeIdentifySize)
	}

	return nvmeNamespace{
		size:   binary.LittleEndian.Uint64(b[0:8]),
		flbas:  b[26],
		dps:    b[29],
		dlfeat: b[33],
	}, nil
}

// formatCDW10 keeps the namespace's format (LBA format, metadata placement, protection)
// and asks for the erase ses: a secure erase must not change the block size under the
// partitions a next install writes.
func formatCDW10(ns nvmeNamespace, ses uint8) uint32 {
	lbafLow := uint32(ns.flbas & 0x0f)
	lbafHigh := uint32(ns.flbas>>5) & 0x3
	mset := uint32(ns.flbas>>4) & 0x1
	pi := uint32(ns.dps & 0x7)
	pil := uint32(ns.dps>>3) & 0x1

	return lbafLow | mset<<4 | pi<<5 | pil<<8 | uint32(ses&0x7)<<9 | lbafHigh<<12
}

func nvmeIdentify(dev nvmeDevice, cns, nsid uint32) ([]byte, error) {
	buf := make([]byte, nvmeIdentifySize)
	cmd := &nvmeCommand{
		Opcode: nvmeOpIdentify, NSID: nsid, CDW10: cns,
		TimeoutMs: uint32(nvmeIdentifyTimeout / time.Millisecond),
	}

	if err := dev.admin(cmd, buf); err != nil {
		return nil, err
	}

	return buf, nil
}

// eraseNVMe formats the namespace in its current format with a crypto erase when the
// controller supports one (the media key is replaced, so every block, spare ones too,
// is unreadable at once), else a user data erase.
func eraseNVMe(ctx context.Context, dev nvmeDevice, path string) (eraseResult, error) {
	if err := ctx.Err(); err != nil {
		return eraseResult{}, err
	}

	nsid, err := dev.namespaceID()
	if err != nil {
		return eraseResult{}, fmt.Errorf("error reading the namespace ID of %s: %w", path, err)
	}

	b, err := nvmeIdentify(dev, nvmeCNSController, 0)
	if err != nil {
		return eraseResult{}, fmt.Errorf("error identifying the controller of %s: %w", path, err)
	}

	ctrl, err := parseIdentifyController(b)
	if err != nil {
		return eraseResult{}, fmt.Errorf("%s: %w", path, err)
	}

	if ctrl.oacs&nvmeOACSFormat == 0 {
		return eraseResult{}, unsupported(path, "controller %q does not support Format NVM", ctrl.model)
	}

	if b, err = nvmeIdentify(dev, nvmeCNSNamespace, nsid); err != nil {
		return eraseResult{}, fmt.Errorf("error identifying namespace %d of %s: %w", nsid, path, err)
	}

	ns, err := parseIdentifyNamespace(b)
	if err != nil {
		return eraseResult{}, fmt.Errorf("%s: %w", path, err)
	}

	res := eraseResult{method: "NVMe Format NVM, user data erase"}
	ses := uint8(nvmeSESUserData)

	if ctrl.fna&nvmeFNACryptoSupports != 0 {
		ses, res.method = nvmeSESCrypto, "NVMe Format NVM, cryptographic erase"
	}

	cmd := &nvmeCommand{
		Opcode: nvmeOpFormatNVM, NSID: nsid, CDW10: formatCDW10(ns, ses),
		TimeoutMs: uint32(nvmeFormatTimeout / time.Millisecond),
	}

	if err = dev.admin(cmd, nil); err != nil {
		var status *nvmeStatusError
		if errors.As(err, &status) && status.status&0x7ff == 0x02 {
			// Invalid field: the controller refuses this erase setting.
			return eraseResult{}, unsupported(path, "controller %q refused the erase (%v)", ctrl.model, err)
		}

		return eraseResult{}, fmt.Errorf("error formatting %s: %w", path, err)
	}

	var notes []string

	if ctrl.fna&(nvmeFNAAllNamespaces|nvmeFNAEraseAllNS) != 0 {
		notes = append(notes, "the controller erases all its namespaces together")
	}

	// A user data erase leaves "indeterminate" contents by the specification; zeroes are
	// promised only where deallocated blocks read as zeroes and the drive deallocates.
	// The samples still have to show the data gone.
	if ns.dlfeat&0x7 == nvmeDLFEATReadZeroes {
		notes = append(notes, "deallocated blocks read as zeroes on this namespace")
	}

	res.note = strings.Join(notes, "; ")

	return res, nil
}

// nvmeFile is the passthrough on an open namespace block device.
type nvmeFile struct{ f *os.File }

func (n *nvmeFile) namespaceID() (uint32, error) {
	r, err := ioctlInt(n.f.Fd(), nvmeIoctlID, 0)
	if err != nil {
		return 0, err
	}

	return uint32(r), nil //nolint:gosec // a namespace ID is 32 bits
}

func (n *nvmeFile) admin(cmd *nvmeCommand, data []byte) error {
	// The kernel reads data through the address in cmd, out of the runtime's sight:
	// pinned, it stays there until the call is done.
	var pin runtime.Pinner
	defer pin.Unpin()

	if len(data) > 0 {
		pin.Pin(&data[0])
		cmd.Addr = uint64(uintptr(unsafePointer(&data[0])))
		cmd.DataLen = uint32(len(data)) //nolint:gosec // an identify page
	}

	r, err := ioctl(n.f.Fd(), nvmeIoctlAdminCmd, unsafePointer(cmd))

	op := map[uint8]string{nvmeOpIdentify: "Identify", nvmeOpFormatNVM: "Format NVM"}[cmd.Opcode]

	if err != nil {
		return fmt.Errorf("NVMe %s: %w", op, err)
	}

	if r != 0 {
		return &nvmeStatusError{op: op, status: uint32(r)} //nolint:gosec // an NVMe status is 32 bits
	}

	return nil
}
