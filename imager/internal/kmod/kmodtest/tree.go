// Package kmodtest writes fake modules and firmware trees for tests: tiny ELF .ko files
// with a .modinfo section, and the index files depmod would write for them.
package kmodtest

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ulikunitz/xz"
)

// Version is the fake kernel's version: the modules tree is <root>/lib/modules/Version.
const Version = "6.6.6-test"

// Tree is a fake kernel: modules tree and firmware tree.
type Tree struct {
	ModulesDir, FirmwareDir string
}

// The fake modules. "net_a" needs "lib_b" (which needs the xz-compressed "lib_c") and has a
// soft dependency on an alias of "soft_e"; "unused" and its dependency "lib_d" must stay out.
var modules = []struct {
	path     string
	deps     []string
	firmware []string
}{
	{"kernel/drivers/net/net-a.ko", []string{"kernel/lib/lib_b.ko", "kernel/lib/lib_c.ko.xz"}, []string{"vendor/a.bin"}},
	{"kernel/lib/lib_b.ko", []string{"kernel/lib/lib_c.ko.xz"}, []string{"vendor/b.bin"}},
	{"kernel/lib/lib_c.ko.xz", nil, []string{"missing.bin"}},
	{"kernel/drivers/net/unused.ko", []string{"kernel/lib/lib_d.ko"}, []string{"vendor/unused.bin"}},
	{"kernel/lib/lib_d.ko", nil, nil},
	{"kernel/crypto/soft_e.ko", nil, nil},
}

// Write creates the fake trees under root.
func Write(t testing.TB, root string) Tree {
	t.Helper()

	tree := Tree{
		ModulesDir:  filepath.Join(root, "lib", "modules", Version),
		FirmwareDir: filepath.Join(root, "firmware"),
	}

	var dep, order strings.Builder

	for _, m := range modules {
		var info []string
		for _, fw := range m.firmware {
			info = append(info, "firmware="+fw)
		}

		info = append(info, "license=GPL", "name="+strings.TrimSuffix(filepath.Base(m.path), ".ko"))
		ko := KO(info...)

		if strings.HasSuffix(m.path, ".xz") {
			ko = xzBytes(t, ko)
		}

		write(t, filepath.Join(tree.ModulesDir, m.path), ko)
		dep.WriteString(m.path + ":")

		for _, d := range m.deps {
			dep.WriteString(" " + d)
		}

		dep.WriteString("\n")
		order.WriteString(strings.TrimSuffix(m.path, ".xz") + "\n")
	}

	files := map[string]string{
		"modules.dep":   dep.String(),
		"modules.order": order.String(),
		"modules.alias": "# Aliases extracted from modules themselves.\n" +
			"alias pci:v00008086d000010D3sv*sd*bc*sc*i* net_a\n" +
			"alias pci:v000015B3d*sv*sd*bc*sc*i* unused\n" +
			"alias crypto-soft-e soft_e\n",
		"modules.softdep":         "# Soft dependencies extracted from modules themselves.\nsoftdep net_a pre: crypto-soft-e\nsoftdep unused pre: lib_d\n",
		"modules.builtin":         "kernel/drivers/block/built-in-blk.ko\n",
		"modules.builtin.modinfo": "built_in_blk.license=GPL\x00",
		"modules.dep.bin":         "binary index, must not ship",
	}
	for name, content := range files {
		write(t, filepath.Join(tree.ModulesDir, name), []byte(content))
	}

	write(t, filepath.Join(tree.FirmwareDir, "vendor", "a.bin"), []byte("firmware a"))
	write(t, filepath.Join(tree.FirmwareDir, "vendor", "b.bin.xz"), xzBytes(t, []byte("firmware b, shipped decompressed")))
	write(t, filepath.Join(tree.FirmwareDir, "vendor", "unused.bin"), []byte("must not ship"))

	return tree
}

// KO returns a minimal relocatable ELF64 object whose .modinfo section holds the given
// key=value pairs, enough for debug/elf and for reading modinfo.
func KO(modinfo ...string) []byte {
	info := []byte(strings.Join(modinfo, "\x00") + "\x00")
	shstr := []byte("\x00.modinfo\x00.shstrtab\x00")

	const ehsize = 64

	infoOff := uint64(ehsize)
	shstrOff := infoOff + uint64(len(info))
	shOff := (shstrOff + uint64(len(shstr)) + 7) &^ 7

	var b bytes.Buffer // writes to it do not fail: their errors are dropped

	le := binary.LittleEndian
	// ELF header: 64-bit, little endian, ET_REL, x86-64, three sections, .shstrtab at 2.
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	_ = binary.Write(&b, le, uint16(1))  // e_type ET_REL
	_ = binary.Write(&b, le, uint16(62)) // e_machine x86-64
	_ = binary.Write(&b, le, uint32(1))  // e_version
	_ = binary.Write(&b, le, uint64(0))  // e_entry
	_ = binary.Write(&b, le, uint64(0))  // e_phoff
	_ = binary.Write(&b, le, shOff)      // e_shoff
	_ = binary.Write(&b, le, uint32(0))  // e_flags
	_ = binary.Write(&b, le, uint16(64)) // e_ehsize
	_ = binary.Write(&b, le, uint16(0))  // e_phentsize
	_ = binary.Write(&b, le, uint16(0))  // e_phnum
	_ = binary.Write(&b, le, uint16(64)) // e_shentsize
	_ = binary.Write(&b, le, uint16(3))  // e_shnum
	_ = binary.Write(&b, le, uint16(2))  // e_shstrndx
	b.Write(info)
	b.Write(shstr)
	b.Write(make([]byte, shOff-uint64(b.Len()))) //nolint:gosec // a buffer's length: not negative

	section := func(name, typ uint32, off, size uint64) {
		for _, v := range []any{name, typ, uint64(0), uint64(0), off, size, uint32(0), uint32(0), uint64(1), uint64(0)} {
			_ = binary.Write(&b, le, v)
		}
	}

	section(0, 0, 0, 0)                          // SHT_NULL
	section(1, 1, infoOff, uint64(len(info)))    // .modinfo, SHT_PROGBITS
	section(10, 3, shstrOff, uint64(len(shstr))) // .shstrtab, SHT_STRTAB

	return b.Bytes()
}

func xzBytes(t testing.TB, data []byte) []byte {
	t.Helper()

	var b bytes.Buffer

	w, err := xz.NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}

	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	return b.Bytes()
}

func write(t testing.TB, file string, data []byte) {
	t.Helper()

	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
