// Package uki assembles a Unified Kernel Image: a PE32+ EFI stub (systemd-boot's
// linux<arch>.efi.stub) with the kernel, initrd, command line and os-release appended as
// sections the stub finds by name at run time. It replaces objcopy, which on an x86-64 host
// does not know arm64 PE files.
package uki

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Section names the systemd stub looks up in its own loaded image.
const (
	SectionOSRel   = ".osrel"
	SectionCmdline = ".cmdline"
	SectionLinux   = ".linux"
	SectionInitrd  = ".initrd"
)

// ErrNotPE is returned for input that is not a PE image at all.
var ErrNotPE = errors.New("not a PE image")

// PE layout constants (PE/COFF specification).
const (
	dosLfanew       = 0x3c
	coffHeaderSize  = 20
	sectionHdrSize  = 40
	opt64SizeOfInit = 8  // SizeOfInitializedData in the optional header
	opt64SizeOfImg  = 56 // SizeOfImage
	opt64CheckSum   = 64 // CheckSum
	// Initialized data, readable: the stub only reads the payloads.
	dataCharacteristics = pe.IMAGE_SCN_CNT_INITIALIZED_DATA | pe.IMAGE_SCN_MEM_READ
)

// Build returns stub with .osrel, .cmdline, .linux and .initrd appended, in that order
// (an empty osrel, cmdline or initrd is left out; the kernel is required). Each section
// is loaded (it gets a virtual address within SizeOfImage), SectionAlignment-aligned after
// the stub's own sections, and its file data FileAlignment-aligned at the end of the file.
// stub is not modified.
func Build(stub, kernel, initrd []byte, cmdline, osrel string) ([]byte, error) {
	if len(kernel) == 0 {
		return nil, errors.New("error building the UKI: the kernel is empty")
	}

	var sections []section

	for _, s := range []section{
		{SectionOSRel, []byte(osrel)},
		{SectionCmdline, []byte(cmdline)},
		{SectionLinux, kernel},
		{SectionInitrd, initrd},
	} {
		if len(s.data) > 0 {
			sections = append(sections, s)
		}
	}

	out, err := appendSections(stub, sections)
	if err != nil {
		return nil, fmt.Errorf("error building the UKI: %w", err)
	}

	return out, nil
}

type section struct {
	name string
	data []byte
}

// layout is what appendSections needs from the stub's headers.
type layout struct {
	coff, opt, table uint64 // file offsets of the COFF header, optional header, section table
	n                uint64 // NumberOfSections
	oh               *pe.OptionalHeader64
	names            map[string]bool
	headerEnd        uint64 // the section table may grow up to here
	nextVA           uint64 // first free virtual address after every section
}

func appendSections(stub []byte, sections []section) ([]byte, error) {
	l, err := parse(stub)
	if err != nil {
		return nil, err
	}

	for _, s := range sections {
		if l.names[s.name] {
			return nil, fmt.Errorf("the stub already has a %s section", s.name)
		}
	}

	k := uint64(len(sections))
	if need := l.table + sectionHdrSize*(l.n+k); need > l.headerEnd {
		return nil, fmt.Errorf("no room for %d more section headers: the table would end at %#x, the headers at %#x", k, need, l.headerEnd)
	}

	if l.n+k > math.MaxUint16 {
		return nil, fmt.Errorf("too many sections: %d", l.n+k)
	}

	sa, fa := uint64(l.oh.SectionAlignment), uint64(l.oh.FileAlignment)
	out := bytes.Clone(stub)
	nextVA := l.nextVA
	initData := uint64(l.oh.SizeOfInitializedData)
	le := binary.LittleEndian

	for i, s := range sections {
		va := alignUp(nextVA, sa)
		offset := alignUp(uint64(len(out)), fa)
		size := uint64(len(s.data))
		rawSize := alignUp(size, fa)

		if va+size > math.MaxUint32 || offset+rawSize > math.MaxUint32 {
			return nil, fmt.Errorf("section %s does not fit in a PE image (virtual address %#x, file offset %#x, %d bytes)", s.name, va, offset, size)
		}

		out = append(out, make([]byte, offset-uint64(len(out)))...)
		out = append(out, s.data...)
		out = append(out, make([]byte, rawSize-size)...)

		h := out[l.table+sectionHdrSize*(l.n+uint64(i)):][:sectionHdrSize]
		clear(h)
		copy(h[0:8], s.name)
		put32(h[8:], size)     // VirtualSize
		put32(h[12:], va)      // VirtualAddress
		put32(h[16:], rawSize) // SizeOfRawData
		put32(h[20:], offset)  // PointerToRawData
		le.PutUint32(h[36:], dataCharacteristics)

		nextVA = va + size
		initData += rawSize
	}

	sizeOfImage := alignUp(nextVA, sa)
	if sizeOfImage > math.MaxUint32 || initData > math.MaxUint32 {
		return nil, fmt.Errorf("the image is too large for PE: %#x bytes", sizeOfImage)
	}

	le.PutUint16(out[l.coff+2:], uint16(l.n+k)) //nolint:gosec // at most MaxUint16, checked above
	put32(out[l.opt+opt64SizeOfInit:], initData)
	put32(out[l.opt+opt64SizeOfImg:], sizeOfImage)
	// The checksum is only checked for drivers loaded at boot; a stale one is worse than none.
	le.PutUint32(out[l.opt+opt64CheckSum:], 0)

	return out, nil
}

// parse reads the stub's headers with debug/pe and locates them in the file, refusing what
// the appender cannot extend safely.
func parse(stub []byte) (*layout, error) {
	// debug/pe reads input without "MZ" as a COFF object, which is not an image.
	if len(stub) < dosLfanew+4 || stub[0] != 'M' || stub[1] != 'Z' {
		return nil, fmt.Errorf("%w: no MZ header", ErrNotPE)
	}

	le := binary.LittleEndian
	peOff := uint64(le.Uint32(stub[dosLfanew:]))

	if peOff+4+coffHeaderSize > uint64(len(stub)) || !bytes.Equal(stub[peOff:peOff+4], []byte("PE\x00\x00")) {
		return nil, fmt.Errorf("%w: no PE signature", ErrNotPE)
	}

	f, err := pe.NewFile(bytes.NewReader(stub))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotPE, err)
	}
	defer f.Close()

	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		return nil, errors.New("the stub is not PE32+ (64-bit): a UKI stub for amd64 or arm64 is")
	}

	for _, a := range []uint32{oh.SectionAlignment, oh.FileAlignment} {
		if a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("the stub has an invalid alignment %#x (SectionAlignment %#x, FileAlignment %#x)", a, oh.SectionAlignment, oh.FileAlignment)
		}
	}

	l := &layout{
		coff:      peOff + 4,
		opt:       peOff + 4 + coffHeaderSize,
		n:         uint64(f.NumberOfSections),
		oh:        oh,
		names:     map[string]bool{},
		headerEnd: min(uint64(oh.SizeOfHeaders), uint64(len(stub))),
	}
	l.table = l.opt + uint64(f.SizeOfOptionalHeader)

	for _, s := range f.Sections {
		l.names[s.Name] = true

		// The new headers must not overwrite a section's data.
		if s.Offset != 0 && s.Size != 0 {
			l.headerEnd = min(l.headerEnd, uint64(s.Offset))
		}

		l.nextVA = max(l.nextVA, uint64(s.VirtualAddress)+uint64(max(s.VirtualSize, s.Size)))
	}

	if l.table+sectionHdrSize*l.n > l.headerEnd {
		return nil, fmt.Errorf("the stub's section table (%#x + %d headers) overlaps its section data at %#x", l.table, l.n, l.headerEnd)
	}

	// New sections go after everything the loader maps: the headers, every section, and
	// whatever else SizeOfImage reserves.
	l.nextVA = max(l.nextVA, uint64(oh.SizeOfHeaders), uint64(oh.SizeOfImage))

	return l, nil
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

// put32 writes a value the caller has checked to fit 32 bits; a larger one (a bug) writes
// its low 32 bits, which debug/pe then reads back inconsistent rather than panicking here.
func put32(b []byte, v uint64) {
	binary.LittleEndian.PutUint32(b, uint32(v&math.MaxUint32))
}
