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
	"io"
	"math"
	"slices"
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
	im, err := New(stub, Sections(kernel, initrd, cmdline, osrel)...)
	if err != nil {
		return nil, err
	}

	out := make([]byte, im.Size())
	if _, err := im.ReadAt(out, 0); err != nil {
		return nil, fmt.Errorf("error building the UKI: %w", err)
	}

	return out, nil
}

// Section is one section to append: its content is read from Data, Size bytes, only
// when the image is read.
type Section struct {
	Name string
	Data io.ReaderAt
	Size int64
}

// Sections are the sections Build appends, from bytes in memory.
func Sections(kernel, initrd []byte, cmdline, osrel string) []Section {
	return []Section{
		BytesSection(SectionOSRel, []byte(osrel)),
		BytesSection(SectionCmdline, []byte(cmdline)),
		BytesSection(SectionLinux, kernel),
		BytesSection(SectionInitrd, initrd),
	}
}

// BytesSection is a section held in memory.
func BytesSection(name string, data []byte) Section {
	return Section{Name: name, Data: bytes.NewReader(data), Size: int64(len(data))}
}

// Image is a UKI laid out over its parts: the stub with its headers extended, then each
// section's data read from its source when the image is read. A provider serves an image
// per machine (its own command line) without copying a kernel and initrd for each.
type Image struct {
	head  []byte
	parts []part
	size  int64
}

type part struct {
	off  int64
	data io.ReaderAt
	size int64
}

// New lays out stub with sections appended in order; an empty section is left out, and
// a .linux section is required. Build describes the layout.
func New(stub []byte, sections ...Section) (*Image, error) {
	var kept []Section

	for _, s := range sections {
		if s.Size < 0 {
			return nil, fmt.Errorf("error building the UKI: section %s has a negative size", s.Name)
		}

		if s.Size > 0 {
			kept = append(kept, s)
		}
	}

	if !slices.ContainsFunc(kept, func(s Section) bool { return s.Name == SectionLinux }) {
		return nil, errors.New("error building the UKI: the kernel is empty")
	}

	im, err := layOut(stub, kept)
	if err != nil {
		return nil, fmt.Errorf("error building the UKI: %w", err)
	}

	return im, nil
}

// Size is the image's length in bytes.
func (im *Image) Size() int64 { return im.size }

// ReadAt implements io.ReaderAt: the bytes between the parts (alignment) are zero.
func (im *Image) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("uki: negative offset")
	}

	if off >= im.size {
		return 0, io.EOF
	}

	want := p
	if rest := im.size - off; int64(len(want)) > rest {
		want = want[:rest]
	}

	clear(want)

	if off < int64(len(im.head)) {
		copy(want, im.head[off:])
	}

	end := off + int64(len(want))

	for _, pt := range im.parts {
		lo, hi := max(off, pt.off), min(end, pt.off+pt.size)
		if lo >= hi {
			continue
		}

		n, err := pt.data.ReadAt(want[lo-off:hi-off], lo-pt.off)
		if int64(n) < hi-lo {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}

			return 0, fmt.Errorf("uki: error reading a section at %d: %w", lo-pt.off, err)
		}
	}

	if len(want) < len(p) {
		return len(want), io.EOF
	}

	return len(want), nil
}

// layout is what layOut needs from the stub's headers.
type layout struct {
	coff, opt, table uint64 // file offsets of the COFF header, optional header, section table
	n                uint64 // NumberOfSections
	oh               *pe.OptionalHeader64
	names            map[string]bool
	headerEnd        uint64 // the section table may grow up to here
	nextVA           uint64 // first free virtual address after every section
}

func layOut(stub []byte, sections []Section) (*Image, error) {
	l, err := parse(stub)
	if err != nil {
		return nil, err
	}

	for _, s := range sections {
		if l.names[s.Name] {
			return nil, fmt.Errorf("the stub already has a %s section", s.Name)
		}

		if len(s.Name) > 8 {
			return nil, fmt.Errorf("section name %q is longer than 8 bytes", s.Name)
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
	im := &Image{head: bytes.Clone(stub)}
	end := uint64(len(stub))
	nextVA := l.nextVA
	initData := uint64(l.oh.SizeOfInitializedData)
	le := binary.LittleEndian

	for i, s := range sections {
		va := alignUp(nextVA, sa)
		offset := alignUp(end, fa)
		size := uint64(s.Size) //nolint:gosec // New refused a negative size
		rawSize := alignUp(size, fa)

		if va+size > math.MaxUint32 || offset+rawSize > math.MaxUint32 {
			return nil, fmt.Errorf("section %s does not fit in a PE image (virtual address %#x, file offset %#x, %d bytes)", s.Name, va, offset, size)
		}

		im.parts = append(im.parts, part{off: int64(offset), data: s.Data, size: s.Size}) //nolint:gosec // below MaxUint32, checked above

		h := im.head[l.table+sectionHdrSize*(l.n+uint64(i)):][:sectionHdrSize]
		clear(h)
		copy(h[0:8], s.Name)
		put32(h[8:], size)     // VirtualSize
		put32(h[12:], va)      // VirtualAddress
		put32(h[16:], rawSize) // SizeOfRawData
		put32(h[20:], offset)  // PointerToRawData
		le.PutUint32(h[36:], dataCharacteristics)

		end = offset + rawSize
		nextVA = va + size
		initData += rawSize
	}

	sizeOfImage := alignUp(nextVA, sa)
	if sizeOfImage > math.MaxUint32 || initData > math.MaxUint32 {
		return nil, fmt.Errorf("the image is too large for PE: %#x bytes", sizeOfImage)
	}

	le.PutUint16(im.head[l.coff+2:], uint16(l.n+k)) //nolint:gosec // at most MaxUint16, checked above
	put32(im.head[l.opt+opt64SizeOfInit:], initData)
	put32(im.head[l.opt+opt64SizeOfImg:], sizeOfImage)
	// The checksum is only checked for drivers loaded at boot; a stale one is worse than none.
	le.PutUint32(im.head[l.opt+opt64CheckSum:], 0)

	im.size = int64(end) //nolint:gosec // below MaxUint32, checked above

	return im, nil
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
