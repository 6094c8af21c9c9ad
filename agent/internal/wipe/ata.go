package wipe

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/anvil-metal/anvil/agent/internal/ioctl"
)

// ATA commands (ACS-3) sent through SCSI ATA PASS-THROUGH(16) (SAT-3).
const (
	ataIdentifyDevice      = 0xec
	ataSecuritySetPassword = 0xf1
	ataSecurityErasePrep   = 0xf3
	ataSecurityEraseUnit   = 0xf4

	ataPassThrough16 = 0x85

	// IDENTIFY DEVICE word 128, security status.
	ataSecSupported     = 1 << 0
	ataSecEnabled       = 1 << 1
	ataSecLocked        = 1 << 2
	ataSecFrozen        = 1 << 3
	ataSecCountExpired  = 1 << 4
	ataSecEnhancedErase = 1 << 5

	// erasePassword is the temporary user password the erase needs. It is fixed and
	// written here, not random: should the erase fail after it is set, an operator can
	// still unlock the drive (hdparm --user-master u --security-disable anvil-wipe).
	erasePassword = "anvil-wipe"

	sgIO         = 0x2285
	sgDxferNone  = -1
	sgDxferToDev = -2
	sgFromDev    = -3
	sgInterface  = 'S'

	ataShortTimeout = 30 * time.Second
	// eraseMargin is added to the drive's own estimate; drives without one get
	// eraseUnknown, long enough for large rotating disks.
	eraseMargin  = 30 * time.Minute
	eraseUnknown = 12 * time.Hour
)

type ataProtocol uint8

// SAT protocol field values.
const (
	ataNonData ataProtocol = 3
	ataPIOIn   ataProtocol = 4
	ataPIOOut  ataProtocol = 5
)

// taskfile is one ATA command's registers.
type taskfile struct {
	protocol ataProtocol
	command  uint8
	features uint16
	count    uint16
	lba      uint64
	device   uint8
}

// cdb16 is the ATA PASS-THROUGH(16) command block carrying tf; a data-transferring
// command moves one 512-byte block, its length in the count field.
func cdb16(tf taskfile) [16]byte {
	var c [16]byte

	c[0] = ataPassThrough16
	c[1] = uint8(tf.protocol) << 1

	switch tf.protocol {
	case ataPIOIn:
		c[2] = 1<<3 | 1<<2 | 2 // T_DIR from device, BYT_BLOK blocks, T_LENGTH in count
	case ataPIOOut:
		c[2] = 1<<2 | 2
	case ataNonData:
		c[2] = 1 << 5 // CK_COND: return the registers, so an abort is seen
	}

	c[3], c[4] = uint8(tf.features>>8), uint8(tf.features) //nolint:gosec // the registers' bytes: truncation is the point
	c[5], c[6] = uint8(tf.count>>8), uint8(tf.count)       //nolint:gosec // as above
	c[7], c[8] = uint8(tf.lba>>24), uint8(tf.lba)          //nolint:gosec // as above
	c[9], c[10] = uint8(tf.lba>>32), uint8(tf.lba>>8)      //nolint:gosec // as above
	c[11], c[12] = uint8(tf.lba>>40), uint8(tf.lba>>16)    //nolint:gosec // as above
	c[13] = tf.device
	c[14] = tf.command

	return c
}

// ataSecurity is what IDENTIFY DEVICE says about the security feature set.
type ataSecurity struct {
	model                             string
	status                            uint16 // word 128
	eraseTime, enhancedEraseTime      time.Duration
	eraseTimeKnown, enhancedTimeKnown bool
}

// ataString reads an IDENTIFY string: words hold their two characters swapped.
func ataString(words []byte) string {
	b := make([]byte, len(words))
	for i := 0; i+1 < len(words); i += 2 {
		b[i], b[i+1] = words[i+1], words[i]
	}

	return string(trimSpaceNUL(b))
}

func trimSpaceNUL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == 0) {
		b = b[:len(b)-1]
	}

	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}

	return b
}

// eraseTime reads word 89 or 90: with bit 15 clear (the older format), bits 7:0 count
// 2-minute steps and 255 means "over 508 minutes"; with bit 15 set, bits 14:0 count them
// and 32767 means "over 65532 minutes"; 0 means not reported.
func eraseTime(w uint16) (time.Duration, bool) {
	var steps uint16

	if w&0x8000 != 0 {
		steps = w & 0x7fff
	} else {
		steps = w & 0xff
	}

	if steps == 0 {
		return 0, false
	}

	return time.Duration(steps) * 2 * time.Minute, true
}

func parseIdentifyDevice(b []byte) (ataSecurity, error) {
	if len(b) < 512 {
		return ataSecurity{}, fmt.Errorf("IDENTIFY DEVICE data is %d bytes, want 512", len(b))
	}

	word := func(n int) uint16 { return binary.LittleEndian.Uint16(b[2*n:]) }

	s := ataSecurity{model: ataString(b[54:94]), status: word(128)}
	s.eraseTime, s.eraseTimeKnown = eraseTime(word(89))
	s.enhancedEraseTime, s.enhancedTimeKnown = eraseTime(word(90))

	return s, nil
}

// ataErasePlan decides whether and how the drive can be erased: enhanced erase where
// supported (it also reaches reallocated sectors), and how long to wait for it.
func ataErasePlan(dev string, s ataSecurity) (enhanced bool, timeout time.Duration, err error) {
	switch st := s.status; {
	case st&ataSecSupported == 0:
		return false, 0, unsupported(dev, "%q does not support the ATA security feature set", s.model)
	case st&ataSecFrozen != 0:
		// The BIOS froze it (SECURITY FREEZE LOCK); only a power cycle or a hot-plug that
		// skips the BIOS thaws it.
		return false, 0, unsupported(dev, "%q is security frozen (a power cycle without the BIOS freezing it thaws it)", s.model)
	case st&ataSecLocked != 0:
		return false, 0, fmt.Errorf("error erasing %s: %q is security locked by a password set before", dev, s.model)
	case st&ataSecEnabled != 0:
		return false, 0, fmt.Errorf("error erasing %s: %q has a user password set before; erasing would need it", dev, s.model)
	case st&ataSecCountExpired != 0:
		return false, 0, fmt.Errorf("error erasing %s: %q refuses passwords until its next power cycle (attempt count expired)", dev, s.model)
	}

	enhanced = s.status&ataSecEnhancedErase != 0

	est, known := s.eraseTime, s.eraseTimeKnown
	if enhanced {
		est, known = s.enhancedEraseTime, s.enhancedTimeKnown
	}

	if !known {
		return enhanced, eraseUnknown, nil
	}

	return enhanced, est + est/2 + eraseMargin, nil
}

// securityPayload is the 512-byte data block of SECURITY SET PASSWORD and SECURITY
// ERASE UNIT: word 0 control bits, words 1-16 the password.
func securityPayload(control uint16, password string) []byte {
	b := make([]byte, 512)
	binary.LittleEndian.PutUint16(b, control)
	copy(b[2:34], password)

	return b
}

// ataPassthrough sends one ATA command; tests fake it.
type ataPassthrough interface {
	do(tf taskfile, data []byte, timeout time.Duration) error
}

func ataIdentify(dev ataPassthrough) (ataSecurity, error) {
	buf := make([]byte, 512)
	if err := dev.do(taskfile{protocol: ataPIOIn, command: ataIdentifyDevice, count: 1}, buf, ataShortTimeout); err != nil {
		return ataSecurity{}, fmt.Errorf("IDENTIFY DEVICE: %w", err)
	}

	return parseIdentifyDevice(buf)
}

// eraseATA sets a temporary user password, then SECURITY ERASE PREPARE and SECURITY
// ERASE UNIT; a finished erase clears the password, which IDENTIFY then confirms.
func eraseATA(ctx context.Context, dev ataPassthrough, path string) (eraseResult, error) {
	if err := ctx.Err(); err != nil {
		return eraseResult{}, err
	}

	s, err := ataIdentify(dev)
	if err != nil {
		return eraseResult{}, fmt.Errorf("error identifying %s: %w", path, err)
	}

	enhanced, timeout, err := ataErasePlan(path, s)
	if err != nil {
		return eraseResult{}, err
	}

	// Control word 0: bit 0 clear (user password), bit 8 clear (security level high).
	if err = dev.do(taskfile{protocol: ataPIOOut, command: ataSecuritySetPassword, count: 1},
		securityPayload(0, erasePassword), ataShortTimeout); err != nil {
		return eraseResult{}, fmt.Errorf("error setting the temporary password on %s: %w", path, err)
	}

	if err = ctx.Err(); err != nil {
		return eraseResult{}, fmt.Errorf("%s keeps the user password %q: %w", path, erasePassword, err)
	}

	if err = dev.do(taskfile{protocol: ataNonData, command: ataSecurityErasePrep}, nil, ataShortTimeout); err != nil {
		return eraseResult{}, fmt.Errorf("error preparing the erase of %s (it keeps the user password %q): %w", path, erasePassword, err)
	}

	control, method := uint16(0), "ATA security erase"
	if enhanced {
		control, method = 1<<1, "ATA enhanced security erase"
	}

	if err = dev.do(taskfile{protocol: ataPIOOut, command: ataSecurityEraseUnit, count: 1},
		securityPayload(control, erasePassword), timeout); err != nil {
		return eraseResult{}, fmt.Errorf("error erasing %s (it may keep the user password %q): %w", path, erasePassword, err)
	}

	after, err := ataIdentify(dev)
	if err != nil {
		return eraseResult{}, fmt.Errorf("error identifying %s after the erase: %w", path, err)
	}

	if after.status&ataSecEnabled != 0 {
		return eraseResult{}, fmt.Errorf("%s still has security enabled after the erase (user password %q)", path, erasePassword)
	}

	// A normal erase writes zeroes; an enhanced one a pattern of the vendor's.
	return eraseResult{method: method, zeroes: !enhanced, note: "the drive reports security disabled again"}, nil
}

// sgIOHdr is struct sg_io_hdr (linux/scsi/sg.h) on 64-bit Linux.
type sgIOHdr struct {
	InterfaceID    int32
	DxferDirection int32
	CmdLen         uint8
	MxSbLen        uint8
	IovecCount     uint16
	DxferLen       uint32
	Dxferp         uintptr
	Cmdp           uintptr
	Sbp            uintptr
	Timeout        uint32
	Flags          uint32
	PackID         int32
	_              [4]byte
	UsrPtr         uintptr
	Status         uint8
	MaskedStatus   uint8
	MsgStatus      uint8
	SbLenWr        uint8
	HostStatus     uint16
	DriverStatus   uint16
	Resid          int32
	Duration       uint32
	Info           uint32
	_              [4]byte
}

// sgResultError reads an SG_IO outcome: the SCSI status, the sense data's key and, from
// an ATA Status Return descriptor, the ATA status and error registers.
func sgResultError(status uint8, hostStatus, driverStatus uint16, sense []byte, tf taskfile) error {
	if hostStatus != 0 {
		return fmt.Errorf("ATA command %#x: host status %#x", tf.command, hostStatus)
	}

	// DRIVER_SENSE (08h) only says sense data came back, which CK_COND asks for.
	if status == 0 && driverStatus&^0x08 == 0 {
		return nil
	}

	key, asc, ascq := senseKey(sense)

	// With CK_COND set, a good command also returns CHECK CONDITION carrying the
	// registers (recovered error, "ATA pass through information available").
	if key == 0x01 && asc == 0x00 && ascq == 0x1d {
		if ataStat, ataErr, ok := ataStatusDescriptor(sense); ok && ataStat&0x01 != 0 {
			return fmt.Errorf("ATA command %#x aborted: status %#x error %#x", tf.command, ataStat, ataErr)
		}

		return nil
	}

	if ataStat, ataErr, ok := ataStatusDescriptor(sense); ok {
		return fmt.Errorf("ATA command %#x failed: sense key %#x, ATA status %#x error %#x", tf.command, key, ataStat, ataErr)
	}

	return fmt.Errorf("ATA command %#x failed: SCSI status %#x, sense key %#x asc %#x ascq %#x", tf.command, status, key, asc, ascq)
}

func senseKey(sense []byte) (key, asc, ascq uint8) {
	if len(sense) < 4 {
		return 0, 0, 0
	}

	switch sense[0] & 0x7f {
	case 0x72, 0x73: // descriptor format
		return sense[1] & 0xf, sense[2], sense[3]
	case 0x70, 0x71: // fixed format
		if len(sense) >= 14 {
			return sense[2] & 0xf, sense[12], sense[13]
		}

		return sense[2] & 0xf, 0, 0
	}

	return 0, 0, 0
}

// ataStatusDescriptor finds the ATA Status Return descriptor (code 09h) of
// descriptor-format sense data.
func ataStatusDescriptor(sense []byte) (status, errReg uint8, ok bool) {
	if len(sense) < 8 || sense[0]&0x7f != 0x72 && sense[0]&0x7f != 0x73 {
		return 0, 0, false
	}

	end := min(len(sense), 8+int(sense[7]))

	for i := 8; i+1 < end; i += 2 + int(sense[i+1]) {
		if sense[i] == 0x09 && i+13 < end {
			return sense[i+13], sense[i+3], true
		}
	}

	return 0, 0, false
}

// sgFile sends ATA commands through SG_IO on an open disk.
type sgFile struct{ f *os.File }

func (s *sgFile) do(tf taskfile, data []byte, timeout time.Duration) error {
	cdb := cdb16(tf)
	sense := make([]byte, 32)

	// The kernel reads and writes these through the addresses in hdr, out of the
	// runtime's sight: pinned, they stay where hdr says until the call is done.
	var pin runtime.Pinner
	defer pin.Unpin()

	pin.Pin(&cdb[0])
	pin.Pin(&sense[0])

	hdr := sgIOHdr{
		InterfaceID:    sgInterface,
		DxferDirection: sgDxferNone,
		CmdLen:         uint8(len(cdb)),
		MxSbLen:        uint8(len(sense)), //nolint:gosec // the 32-byte sense buffer above
		Cmdp:           uintptr(ioctl.Pointer(&cdb[0])),
		Sbp:            uintptr(ioctl.Pointer(&sense[0])),
		Timeout:        uint32(timeout / time.Millisecond), //nolint:gosec // ATA's longest erase time and the margin: under 2^32 ms
	}

	if len(data) > 0 {
		pin.Pin(&data[0])
		hdr.DxferLen = uint32(len(data)) //nolint:gosec // a sector or an identify page
		hdr.Dxferp = uintptr(ioctl.Pointer(&data[0]))
		hdr.DxferDirection = sgDxferToDev

		if tf.protocol == ataPIOIn {
			hdr.DxferDirection = sgFromDev
		}
	}

	_, err := ioctl.Ptr(s.f.Fd(), sgIO, ioctl.Pointer(&hdr))

	if err != nil {
		return fmt.Errorf("SG_IO: %w", err)
	}

	return sgResultError(hdr.Status, hdr.HostStatus, hdr.DriverStatus, sense[:min(int(hdr.SbLenWr), len(sense))], tf)
}
