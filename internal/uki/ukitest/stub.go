// Package ukitest makes synthetic EFI stubs for tests of code that builds UKIs.
package ukitest

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// StubSpec describes a synthetic EFI application: a header page, one .text section, and
// optionally trailing bytes outside every section (as Debian's stub has).
type StubSpec struct {
	PE32          bool   // PE32 (optional header magic 0x10b) instead of PE32+
	SizeOfHeaders uint32 // 0: 0x400
	Sections      []string
	Trailer       int
	FileAlign     uint32 // 0: 0x200
}

// Stub writes a minimal but valid PE image the way gnu-efi's hand-made headers are
// laid out: DOS header, "PE\0\0" at 0x40, COFF, optional header with 6 data directories,
// section table, then each section's data, SectionAlignment 0x1000.
func Stub(t testing.TB, spec StubSpec) []byte {
	t.Helper()

	le := binary.LittleEndian
	hdrs := spec.SizeOfHeaders
	if hdrs == 0 {
		hdrs = 0x400
	}

	fa := spec.FileAlign
	if fa == 0 {
		fa = 0x200
	}

	names := spec.Sections
	if names == nil {
		names = []string{".text"}
	}

	optSize := 0x70 + 6*8 // PE32+ fixed part + 6 data directories
	magic := uint16(0x20b)

	if spec.PE32 {
		optSize = 0x60 + 6*8
		magic = 0x10b
	}

	buf := make([]byte, hdrs)
	copy(buf, "MZ")
	le.PutUint32(buf[0x3c:], 0x40)
	copy(buf[0x40:], "PE\x00\x00")
	coff := buf[0x44:]
	le.PutUint16(coff[0:], 0xaa64)
	le.PutUint16(coff[2:], uint16(len(names))) //nolint:gosec // a handful of sections
	le.PutUint16(coff[16:], uint16(optSize))
	le.PutUint16(coff[18:], 0x206) // executable, line numbers stripped, debug stripped

	opt := buf[0x58:]
	le.PutUint16(opt[0:], magic)
	le.PutUint32(opt[16:], 0x1000)                           // AddressOfEntryPoint
	le.PutUint32(opt[32:], 0x1000)                           // SectionAlignment
	le.PutUint32(opt[36:], fa)                               // FileAlignment
	le.PutUint32(opt[56:], 0x1000+0x1000*uint32(len(names))) //nolint:gosec // a handful of sections
	le.PutUint32(opt[60:], hdrs)
	le.PutUint16(opt[68:], 10) // EFI application

	if spec.PE32 {
		le.PutUint32(opt[92:], 6) // NumberOfRvaAndSizes
	} else {
		le.PutUint32(opt[108:], 6)
	}

	table := 0x58 + optSize
	fileOff := uint32(len(buf)) //nolint:gosec // a stub of a few KiB

	for i, name := range names {
		h := buf[table+40*i:][:40]
		copy(h, name)
		le.PutUint32(h[8:], 0x100)
		le.PutUint32(h[12:], 0x1000+0x1000*uint32(i))
		le.PutUint32(h[16:], fa)
		le.PutUint32(h[20:], fileOff)
		le.PutUint32(h[36:], 0x60000020)
		fileOff += fa
	}

	for i := range names {
		buf = append(buf, bytes.Repeat([]byte{byte(0xc0 + i)}, int(fa))...)
	}

	return append(buf, bytes.Repeat([]byte{0xee}, spec.Trailer)...)
}
