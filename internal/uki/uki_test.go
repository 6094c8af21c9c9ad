package uki_test

import (
	"bytes"
	"debug/pe"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/uki"
	"github.com/anvil-metal/anvil/internal/uki/ukitest"
)

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
		{name: "all four", stub: ukitest.Stub(t, ukitest.StubSpec{}), kernel: kernel, initrd: initrd, cmdline: "console=ttyAMA0", osrel: "ID=anvil\n", want: []string{".osrel", ".cmdline", ".linux", ".initrd"}},
		{name: "trailing bytes kept", stub: ukitest.Stub(t, ukitest.StubSpec{Trailer: 0x1d4}), kernel: kernel, initrd: initrd, cmdline: "x", osrel: "ID=anvil\n", want: []string{".osrel", ".cmdline", ".linux", ".initrd"}},
		{name: "kernel only", stub: ukitest.Stub(t, ukitest.StubSpec{}), kernel: kernel, want: []string{".linux"}},
		{name: "two stub sections, small file alignment", stub: ukitest.Stub(t, ukitest.StubSpec{Sections: []string{".text", ".data"}, FileAlign: 0x20}), kernel: kernel, initrd: initrd, cmdline: "c", want: []string{".cmdline", ".linux", ".initrd"}},
		{name: "header room exact", stub: ukitest.Stub(t, ukitest.StubSpec{SizeOfHeaders: 0xf8 + 5*40}), kernel: kernel, initrd: initrd, cmdline: "c", osrel: "o", want: []string{".osrel", ".cmdline", ".linux", ".initrd"}},
		{name: "no room for headers", stub: ukitest.Stub(t, ukitest.StubSpec{SizeOfHeaders: 0xf8 + 5*40 - 1}), kernel: kernel, initrd: initrd, cmdline: "c", osrel: "o", err: "no room for 4 more section headers"},
		{name: "PE32", stub: ukitest.Stub(t, ukitest.StubSpec{PE32: true}), kernel: kernel, err: "not PE32+"},
		{name: "linux already there", stub: ukitest.Stub(t, ukitest.StubSpec{Sections: []string{".text", ".linux"}}), kernel: kernel, err: "already has a .linux section"},
		{name: "cmdline already there", stub: ukitest.Stub(t, ukitest.StubSpec{Sections: []string{".cmdline"}}), kernel: kernel, cmdline: "c", err: "already has a .cmdline section"},
		{name: "no kernel", stub: ukitest.Stub(t, ukitest.StubSpec{}), err: "kernel is empty"},
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
	f.Add(ukitest.Stub(f, ukitest.StubSpec{}))
	f.Add(ukitest.Stub(f, ukitest.StubSpec{PE32: true}))

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
	stub := ukitest.Stub(t, ukitest.StubSpec{Trailer: 0x1d4})
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
	stub := ukitest.Stub(t, ukitest.StubSpec{})

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
