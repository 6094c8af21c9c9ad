package uki_test

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/uki"
)

// stubSpec describes a synthetic EFI application: a header page, one .text section, and
// optionally trailing bytes outside every section (as Debian's stub has).
type stubSpec struct {
	pe32          bool   // PE32 (optional header magic 0x10b) instead of PE32+
	sizeOfHeaders uint32 // 0: 0x400
	sections      []string
	trailer       int
	fileAlign     uint32 // 0: 0x200
}

// synthStub writes a minimal but valid PE image the way gnu-efi's hand-made headers are
// laid out: DOS header, "PE\0\0" at 0x40, COFF, optional header with 6 data directories,
// section table, then each section's data, SectionAlignment 0x1000.
func synthStub(t testing.TB, spec stubSpec) []byte {
	t.Helper()

	le := binary.LittleEndian
	hdrs := spec.sizeOfHeaders
	if hdrs == 0 {
		hdrs = 0x400
	}

	fa := spec.fileAlign
	if fa == 0 {
		fa = 0x200
	}

	names := spec.sections
	if names == nil {
		names = []string{".text"}
	}

	optSize := 0x70 + 6*8 // PE32+ fixed part + 6 data directories
	magic := uint16(0x20b)

	if spec.pe32 {
		optSize = 0x60 + 6*8
		magic = 0x10b
	}

	buf := make([]byte, hdrs)
	copy(buf, "MZ")
	le.PutUint32(buf[0x3c:], 0x40)
	copy(buf[0x40:], "PE\x00\x00")
	coff := buf[0x44:]
	le.PutUint16(coff[0:], 0xaa64)
	le.PutUint16(coff[2:], uint16(len(names)))
	le.PutUint16(coff[16:], uint16(optSize))
	le.PutUint16(coff[18:], 0x206) // executable, line numbers stripped, debug stripped

	opt := buf[0x58:]
	le.PutUint16(opt[0:], magic)
	le.PutUint32(opt[16:], 0x1000) // AddressOfEntryPoint
	le.PutUint32(opt[32:], 0x1000) // SectionAlignment
	le.PutUint32(opt[36:], fa)     // FileAlignment
	le.PutUint32(opt[56:], 0x1000+0x1000*uint32(len(names)))
	le.PutUint32(opt[60:], hdrs)
	le.PutUint16(opt[68:], 10) // EFI application

	if spec.pe32 {
		le.PutUint32(opt[92:], 6) // NumberOfRvaAndSizes
	} else {
		le.PutUint32(opt[108:], 6)
	}

	table := 0x58 + optSize
	fileOff := uint32(len(buf))

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

	return append(buf, bytes.Repeat([]byte{0xee}, spec.trailer)...)
}

func TestBuild(t *testing.T) {
	kernel := bytes.Repeat([]byte("kernel"), 1000)
	initrd := bytes.Repeat([]byte("initrd!"), 333)

	for _, tc := range []struct {
		name           string
		stub           []byte
		kernel, initrd []byte
		cmdline, osrel string
		want           []string // appended section names, in order
		err            string
		notPE          bool
	}{
		{name: "all four", stub: synthStub(t, stubSpec{}), kernel: kernel, initrd: initrd, cmdline: "console=ttyAMA0", osrel: "ID=anvil\n", want: []string{".osrel", ".cmdline", ".linux", ".initrd"}},
		{name: "trailing bytes kept", stub: synthStub(t, stubSpec{trailer: 0x1d4}), kernel: kernel, initrd: initrd, cmdline: "x", osrel: "ID=anvil\n", want: []string{".osrel", ".cmdline", ".linux", ".initrd"}},
		{name: "kernel only", stub: synthStub(t, stubSpec{}), kernel: kernel, want: []string{".linux"}},
		{name: "two stub sections, small file alignment", stub: synthStub(t, stubSpec{sections: []string{".text", ".data"}, fileAlign: 0x20}), kernel: kernel, initrd: initrd, cmdline: "c", want: []string{".cmdline", ".linux", ".initrd"}},
		{name: "header room exact", stub: synthStub(t, stubSpec{sizeOfHeaders: 0xf8 + 5*40}), kernel: kernel, initrd: initrd, cmdline: "c", osrel: "o", want: []string{".osrel", ".cmdline", ".linux", ".initrd"}},
		{name: "no room for headers", stub: synthStub(t, stubSpec{sizeOfHeaders: 0xf8 + 5*40 - 1}), kernel: kernel, initrd: initrd, cmdline: "c", osrel: "o", err: "no room for 4 more section headers"},
		{name: "PE32", stub: synthStub(t, stubSpec{pe32: true}), kernel: kernel, err: "not PE32+"},
		{name: "linux already there", stub: synthStub(t, stubSpec{sections: []string{".text", ".linux"}}), kernel: kernel, err: "already has a .linux section"},
		{name: "cmdline already there", stub: synthStub(t, stubSpec{sections: []string{".cmdline"}}), kernel: kernel, cmdline: "c", err: "already has a .cmdline section"},
		{name: "no kernel", stub: synthStub(t, stubSpec{}), err: "kernel is empty"},
		{name: "not PE", stub: []byte("#!/bin/sh\necho hello\n" + string(make([]byte, 100))), kernel: kernel, notPE: true, err: "no MZ header"},
		{name: "MZ without PE", stub: append([]byte("MZ"), make([]byte, 200)...), kernel: kernel, notPE: true, err: "no PE signature"},
		{name: "empty", kernel: kernel, notPE: true, err: "no MZ header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := bytes.Clone(tc.stub)
			out, err := uki.Build(tc.stub, tc.kernel, tc.initrd, tc.cmdline, tc.osrel)
			assert.Equal(t, orig, tc.stub, "the stub was modified")

			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				assert.Equal(t, tc.notPE, errors.Is(err, uki.ErrNotPE))
				assert.Nil(t, out)

				return
			}

			require.NoError(t, err)

			payload := map[string][]byte{".osrel": []byte(tc.osrel), ".cmdline": []byte(tc.cmdline), ".linux": tc.kernel, ".initrd": tc.initrd}
			checkImage(t, tc.stub, out, tc.want, payload)
		})
	}
}

// checkImage reads out back with debug/pe: the stub's sections unchanged, then the
// appended ones in order, each loaded after the previous, aligned, with its bytes.
func checkImage(t *testing.T, stub, out []byte, want []string, payload map[string][]byte) {
	t.Helper()

	in, err := pe.NewFile(bytes.NewReader(stub))
	require.NoError(t, err)

	f, err := pe.NewFile(bytes.NewReader(out))
	require.NoError(t, err)

	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	require.True(t, ok)

	ih, ok := in.OptionalHeader.(*pe.OptionalHeader64)
	require.True(t, ok)

	require.Len(t, f.Sections, len(in.Sections)+len(want))
	assert.Equal(t, in.Machine, f.Machine)
	assert.Equal(t, ih.AddressOfEntryPoint, oh.AddressOfEntryPoint)
	assert.Equal(t, ih.SizeOfHeaders, oh.SizeOfHeaders)
	assert.Zero(t, oh.CheckSum)
	// Everything the stub had, down to its trailing bytes, is still at its place.
	assert.Equal(t, stub[ih.SizeOfHeaders:], out[ih.SizeOfHeaders:len(stub)])

	var end, added uint32

	for i, s := range in.Sections {
		assert.Equal(t, s.SectionHeader, f.Sections[i].SectionHeader)
		end = max(end, s.VirtualAddress+max(s.VirtualSize, s.Size))
	}

	end = max(end, ih.SizeOfImage)
	prevRawEnd := uint32(len(stub))

	for i, name := range want {
		s := f.Sections[len(in.Sections)+i]
		data := payload[name]

		assert.Equal(t, name, s.Name)
		assert.Zero(t, s.VirtualAddress%oh.SectionAlignment, "%s VA %#x not aligned", name, s.VirtualAddress)
		assert.GreaterOrEqual(t, s.VirtualAddress, end, "%s overlaps what precedes it", name)
		assert.EqualValues(t, len(data), s.VirtualSize)
		assert.Zero(t, s.Offset%oh.FileAlignment)
		assert.Zero(t, s.Size%oh.FileAlignment)
		assert.GreaterOrEqual(t, s.Offset, prevRawEnd)
		assert.Equal(t, uint32(pe.IMAGE_SCN_CNT_INITIALIZED_DATA|pe.IMAGE_SCN_MEM_READ), s.Characteristics)

		raw, err := s.Data()
		require.NoError(t, err)
		require.Len(t, raw, int(s.Size))
		assert.True(t, bytes.Equal(data, raw[:len(data)]), "%s: bytes differ", name)
		assert.Equal(t, make([]byte, len(raw)-len(data)), raw[len(data):], "%s: padding is not zero", name)

		end = s.VirtualAddress + s.VirtualSize
		prevRawEnd = s.Offset + s.Size
		added += s.Size
	}

	assert.Equal(t, (end+oh.SectionAlignment-1)&^(oh.SectionAlignment-1), oh.SizeOfImage)
	assert.Equal(t, ih.SizeOfInitializedData+added, oh.SizeOfInitializedData)
	assert.Len(t, out, int(prevRawEnd))
}

// debianStub is systemd-boot-efi:arm64's stub as hack/arm64-assets.sh or the findings'
// scratch tree extract it.
var debianStubs = []string{
	"../../../_out/arm64/root/usr/lib/systemd/boot/efi/linuxaa64.efi.stub",
	"/tmp/arm64proto/x/systemd-boot-efi/usr/lib/systemd/boot/efi/linuxaa64.efi.stub",
}

func TestBuildDebianStub(t *testing.T) {
	var stub []byte

	for _, p := range debianStubs {
		if b, err := os.ReadFile(p); err == nil {
			stub = b

			break
		}
	}

	if stub == nil {
		t.Skipf("systemd-boot-efi:arm64's linuxaa64.efi.stub is not extracted (hack/arm64-assets.sh does it); looked at %v", debianStubs)
	}

	kernel := append([]byte("MZ"), bytes.Repeat([]byte{0x1f, 0x20, 0x03, 0xd5}, 300_000)...)
	initrd := bytes.Repeat([]byte("070701"), 50_000)
	cmdline := "console=ttyAMA0,115200n8 panic=30"
	osrel := "ID=anvil\nNAME=\"Anvil metal agent\"\n"

	out, err := uki.Build(stub, kernel, initrd, cmdline, osrel)
	require.NoError(t, err)

	f, err := pe.NewFile(bytes.NewReader(out))
	require.NoError(t, err)
	assert.Equal(t, uint16(pe.IMAGE_FILE_MACHINE_ARM64), f.Machine)

	checkImage(t, stub, out, []string{".osrel", ".cmdline", ".linux", ".initrd"},
		map[string][]byte{".osrel": []byte(osrel), ".cmdline": []byte(cmdline), ".linux": kernel, ".initrd": initrd})

	// Building again from the UKI is refused: its sections are there already.
	_, err = uki.Build(out, kernel, initrd, cmdline, osrel)
	assert.ErrorContains(t, err, "already has a .osrel section")
}

// FuzzBuild feeds arbitrary stubs: Build must return an error or an image debug/pe reads
// back with the kernel in its last section, never panic.
func FuzzBuild(f *testing.F) {
	f.Add(synthStub(f, stubSpec{}))
	f.Add(synthStub(f, stubSpec{pe32: true}))

	kernel := []byte("MZkernel")

	f.Fuzz(func(t *testing.T, stub []byte) {
		out, err := uki.Build(stub, kernel, []byte("initrd"), "cmdline", "")
		if err != nil {
			return
		}

		pf, err := pe.NewFile(bytes.NewReader(out))
		require.NoError(t, err, "Build's output does not parse")

		defer pf.Close()

		require.NotEmpty(t, pf.Sections)
		last := pf.Sections[len(pf.Sections)-1]
		require.Equal(t, ".initrd", last.Name)

		linux := pf.Sections[len(pf.Sections)-2]
		require.Equal(t, ".linux", linux.Name)
		data, err := linux.Data()
		require.NoError(t, err)
		require.Equal(t, kernel, data[:len(kernel)])
	})
}

// TestImageReadAt reads a laid-out image in pieces of every alignment, across the head,
// the padding and each section, and gets what Build returns whole.
func TestImageReadAt(t *testing.T) {
	stub := synthStub(t, stubSpec{trailer: 0x1d4})
	kernel := bytes.Repeat([]byte("kernel"), 1000)
	initrd := bytes.Repeat([]byte("initrd!"), 333)

	whole, err := uki.Build(stub, kernel, initrd, "console=ttyAMA0", "ID=anvil\n")
	require.NoError(t, err)

	im, err := uki.New(stub, uki.Sections(kernel, initrd, "console=ttyAMA0", "ID=anvil\n")...)
	require.NoError(t, err)
	require.Equal(t, int64(len(whole)), im.Size())

	for _, chunk := range []int{1, 7, 512, 4096, 65536} {
		var got []byte

		buf := make([]byte, chunk)

		for off := int64(0); ; off += int64(chunk) {
			n, err := im.ReadAt(buf, off)
			got = append(got, buf[:n]...)

			if errors.Is(err, io.EOF) {
				break
			}

			require.NoError(t, err)
		}

		require.Equal(t, whole, got, "read in pieces of %d", chunk)
	}

	// Through the standard library, as a provider serves it.
	got, err := io.ReadAll(io.NewSectionReader(im, 0, im.Size()))
	require.NoError(t, err)
	assert.Equal(t, whole, got)

	_, err = im.ReadAt(make([]byte, 1), -1)
	require.Error(t, err)
}

// shortReader claims more than it holds, as a file truncated under the image would.
type shortReader struct{ data []byte }

func (r shortReader) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(r.data).ReadAt(p, off)
}

func TestImageShortSection(t *testing.T) {
	stub := synthStub(t, stubSpec{})

	im, err := uki.New(stub,
		uki.Section{Name: uki.SectionLinux, Data: shortReader{[]byte("kern")}, Size: 100},
		uki.BytesSection(uki.SectionCmdline, []byte("c")))
	require.NoError(t, err)

	_, err = io.ReadAll(io.NewSectionReader(im, 0, im.Size()))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)

	_, err = uki.New(stub, uki.Section{Name: uki.SectionLinux, Data: shortReader{}, Size: -1})
	require.ErrorContains(t, err, "negative size")

	_, err = uki.New(stub, uki.BytesSection(".toolongname", []byte("x")), uki.BytesSection(uki.SectionLinux, []byte("k")))
	require.ErrorContains(t, err, "longer than 8 bytes")
}
