// Package nvme sends admin commands to NVMe controllers through the kernel's passthrough
// (linux/nvme_ioctl.h): Identify, Get Log Page, Format NVM, as the agent's wipe and health
// checks need them (NVM Express Base Specification 2.0).
package nvme

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/agent/internal/ioctl"
)

// Admin command opcodes.
const (
	OpGetLogPage = 0x02
	OpIdentify   = 0x06
	OpFormatNVM  = 0x80
)

// Identify.
const (
	CNSNamespace  = 0x00
	CNSController = 0x01
	IdentifySize  = 4096

	identifyTimeout = 30 * time.Second
	logPageTimeout  = 30 * time.Second
)

// _IO('N', 0x40) and _IOWR('N', 0x41, struct nvme_passthru_cmd) of linux/nvme_ioctl.h.
const (
	ioctlID       = 0x4e40
	ioctlAdminCmd = 0xc0484e41
)

// Command is struct nvme_passthru_cmd (72 bytes).
type Command struct {
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

// Device is an NVMe namespace's admin passthrough; tests fake it.
type Device interface {
	NamespaceID() (uint32, error)
	// Admin runs cmd with data as its buffer (Addr and DataLen are filled in).
	Admin(cmd *Command, data []byte) error
}

// StatusError is a command the controller completed with an error status.
type StatusError struct {
	Op     string
	Status uint32
}

func (e *StatusError) Error() string {
	sct, sc := (e.Status>>8)&0x7, e.Status&0xff

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

	return fmt.Sprintf("NVMe %s failed with status type %#x code %#x%s", e.Op, sct, sc, what)
}

// Controller is what Identify Controller says that the agent reads.
type Controller struct {
	OACS   uint16 // optional admin commands supported
	FNA    uint8  // Format NVM attributes
	Model  string
	Serial string
}

// ParseIdentifyController reads an Identify Controller page.
func ParseIdentifyController(b []byte) (Controller, error) {
	if len(b) < IdentifySize {
		return Controller{}, fmt.Errorf("identify controller data is %d bytes, want %d", len(b), IdentifySize)
	}

	return Controller{
		Serial: strings.TrimSpace(string(b[4:24])),
		Model:  strings.TrimSpace(string(b[24:64])),
		OACS:   binary.LittleEndian.Uint16(b[256:258]),
		FNA:    b[524],
	}, nil
}

// Namespace is what Identify Namespace says that the agent reads.
type Namespace struct {
	Size   uint64 // in logical blocks
	FLBAS  uint8  // formatted LBA size: format index, metadata placement
	DPS    uint8  // end-to-end protection settings
	DLFEAT uint8
}

// ParseIdentifyNamespace reads an Identify Namespace page.
func ParseIdentifyNamespace(b []byte) (Namespace, error) {
	if len(b) < IdentifySize {
		return Namespace{}, fmt.Errorf("identify namespace data is %d bytes, want %d", len(b), IdentifySize)
	}

	return Namespace{
		Size:   binary.LittleEndian.Uint64(b[0:8]),
		FLBAS:  b[26],
		DPS:    b[29],
		DLFEAT: b[33],
	}, nil
}

// Identify returns the Identify page cns (of namespace nsid).
func Identify(dev Device, cns, nsid uint32) ([]byte, error) {
	buf := make([]byte, IdentifySize)
	cmd := &Command{
		Opcode: OpIdentify, NSID: nsid, CDW10: cns,
		TimeoutMs: uint32(identifyTimeout / time.Millisecond),
	}

	if err := dev.Admin(cmd, buf); err != nil {
		return nil, err
	}

	return buf, nil
}

// GlobalNSID asks a log page of the controller rather than of one namespace.
const GlobalNSID = 0xffffffff

// GetLogPage returns size bytes (a multiple of 4) of log page lid.
func GetLogPage(dev Device, lid uint8, nsid uint32, size int) ([]byte, error) {
	if size <= 0 || size%4 != 0 {
		return nil, fmt.Errorf("a log page is read in dwords, not %d bytes", size)
	}

	numd := uint32(size/4 - 1) //nolint:gosec // a log page's size
	buf := make([]byte, size)
	cmd := &Command{
		Opcode: OpGetLogPage, NSID: nsid,
		CDW10:     uint32(lid) | (numd&0xffff)<<16,
		CDW11:     numd >> 16,
		TimeoutMs: uint32(logPageTimeout / time.Millisecond),
	}

	if err := dev.Admin(cmd, buf); err != nil {
		return nil, err
	}

	return buf, nil
}

// File is the passthrough on an open namespace block device.
type File struct{ F *os.File }

// NamespaceID implements Device.
func (n *File) NamespaceID() (uint32, error) {
	r, err := ioctl.Int(n.F.Fd(), ioctlID, 0)
	if err != nil {
		return 0, err
	}

	return uint32(r), nil //nolint:gosec // a namespace ID is 32 bits
}

// opNames name the commands in errors.
var opNames = map[uint8]string{OpIdentify: "Identify", OpFormatNVM: "Format NVM", OpGetLogPage: "Get Log Page"}

// Admin implements Device.
func (n *File) Admin(cmd *Command, data []byte) error {
	// The kernel reads data through the address in cmd, out of the runtime's sight:
	// pinned, it stays there until the call is done.
	var pin runtime.Pinner
	defer pin.Unpin()

	if len(data) > 0 {
		pin.Pin(&data[0])
		cmd.Addr = uint64(uintptr(ioctl.Pointer(&data[0])))
		cmd.DataLen = uint32(len(data)) //nolint:gosec // a page
	}

	r, err := ioctl.Ptr(n.F.Fd(), ioctlAdminCmd, ioctl.Pointer(cmd))

	op := opNames[cmd.Opcode]

	if err != nil {
		return fmt.Errorf("NVMe %s: %w", op, err)
	}

	if r != 0 {
		return &StatusError{Op: op, Status: uint32(r)} //nolint:gosec // an NVMe status is 32 bits
	}

	return nil
}
