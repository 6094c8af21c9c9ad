package talosbuild

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// installerTree lays out a fake unpacked installer tree (Debian/installer/root): the
// programs static, GRUB's modules, systemd-boot and xfsprogs' configuration.
func installerTree(t *testing.T, debian string, prog []byte) {
	t.Helper()

	deb := tree{root: filepath.Join(debian, "installer", "root")}
	paths := map[string]kind{
		"/usr/lib/grub/i386-pc/normal.mod":              file("bios normal", 0o644),
		"/usr/lib/grub/i386-pc/boot.img":                file("bios boot.img", 0o644),
		"/usr/lib/grub/x86_64-efi/normal.mod":           file("efi normal", 0o644),
		"/usr/share/grub/unicode.pf2":                   file("font", 0o644),
		"/usr/lib/systemd/boot/efi/systemd-bootx64.efi": file("MZ systemd-boot", 0o644),
		"/usr/lib/systemd/boot/efi/linuxx64.efi.stub":   file("MZ stub", 0o644),
		xfsConfigDebian:                                 file("[metadata]\ncrc=1\n", 0o644),
		"/usr/share/doc/grub/README":                    file("not shipped", 0o644),
	}

	for _, p := range installerPrograms {
		paths[p] = file(string(prog)+"\x00"+p, 0o755)
	}

	lay(t, deb, paths)
}

// TestWriteInstallerBase: the installer image's base layer holds Talos' installer (also
// imager), the Debian programs it runs under /usr/bin, GRUB's modules and fonts,
// systemd-boot and its stub where Talos looks for them, xfsprogs' configuration under the
// name Talos asks for, in Talos' FHS; the same inputs give the same bytes.
func TestWriteInstallerBase(t *testing.T) {
	t.Parallel()

	prog := tinyELF("program")
	dir := t.TempDir()
	opts := Options{
		Bins: filepath.Join(dir, "bins"), Debian: filepath.Join(dir, "debian"), Out: filepath.Join(dir, "out"),
		MTime: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}

	require.NoError(t, os.MkdirAll(opts.Bins, 0o755))
	require.NoError(t, os.MkdirAll(opts.Out, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(opts.Bins, "installer"), []byte("\x7fELF installer"), 0o755))
	installerTree(t, opts.Debian, prog)

	require.NoError(t, writeInstallerBase(t.Context(), opts, filepath.Join(dir, "work")))

	layer, err := os.ReadFile(filepath.Join(opts.Out, InstallerBaseFile))
	require.NoError(t, err)

	type entry struct {
		typ      byte
		mode     int64
		content  string
		linkname string
	}

	got := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(layer))

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}

		require.NoError(t, err)

		b, err := io.ReadAll(tr)
		require.NoError(t, err)

		got[h.Name] = entry{typ: h.Typeflag, mode: h.Mode, content: string(b), linkname: h.Linkname}
		assert.True(t, h.ModTime.Equal(opts.MTime), "%s's time", h.Name)
		assert.Zero(t, h.Uid, h.Name)
	}

	want := map[string]entry{
		"usr/bin/installer":                     {typ: tar.TypeReg, mode: 0o755, content: "\x7fELF installer"},
		"usr/bin/imager":                        {typ: tar.TypeSymlink, mode: 0o777, linkname: "installer"},
		"usr/bin/mkfs.vfat":                     {typ: tar.TypeSymlink, mode: 0o777, linkname: "mkfs.fat"},
		"usr/lib/grub/i386-pc/normal.mod":       {typ: tar.TypeReg, mode: 0o644, content: "bios normal"},
		"usr/lib/grub/i386-pc/boot.img":         {typ: tar.TypeReg, mode: 0o644, content: "bios boot.img"},
		"usr/lib/grub/x86_64-efi/normal.mod":    {typ: tar.TypeReg, mode: 0o644, content: "efi normal"},
		"usr/share/grub/unicode.pf2":            {typ: tar.TypeReg, mode: 0o644, content: "font"},
		"usr/install/amd64/systemd-boot.efi":    {typ: tar.TypeReg, mode: 0o644, content: "MZ systemd-boot"},
		"usr/install/amd64/systemd-stub.efi":    {typ: tar.TypeReg, mode: 0o644, content: "MZ stub"},
		"usr/share/xfsprogs/mkfs/lts_6.18.conf": {typ: tar.TypeReg, mode: 0o644, content: "[metadata]\ncrc=1\n"},
		"bin":                                   {typ: tar.TypeSymlink, mode: 0o777, linkname: "usr/bin"},
		"usr/sbin":                              {typ: tar.TypeSymlink, mode: 0o777, linkname: "bin"},
		"lib64":                                 {typ: tar.TypeSymlink, mode: 0o777, linkname: "usr/lib"},
		"tmp/":                                  {typ: tar.TypeDir, mode: 0o1777},
		"root/":                                 {typ: tar.TypeDir, mode: 0o750},
	}

	for _, p := range installerPrograms {
		want["usr/bin/"+filepath.Base(p)] = entry{typ: tar.TypeReg, mode: 0o755, content: string(prog) + "\x00" + p}
	}

	for name, w := range want {
		g, ok := got[name]
		if assert.True(t, ok, "%s in the layer", name) {
			assert.Equal(t, w, g, name)
		}
	}

	for _, name := range []string{"usr/share/doc/grub/README", "usr/sbin/grub-install", "usr/lib/systemd/boot/efi/linuxx64.efi.stub"} {
		assert.NotContains(t, got, name)
	}

	// Again, in a new work directory: the same bytes.
	require.NoError(t, writeInstallerBase(t.Context(), opts, filepath.Join(dir, "work2")))

	again, err := os.ReadFile(filepath.Join(opts.Out, InstallerBaseFile))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(layer, again), "two builds differ")

	// A program missing is an error naming it.
	require.NoError(t, os.Remove(filepath.Join(opts.Debian, "installer", "root", "usr", "sbin", "grub-probe")))
	assert.ErrorContains(t, writeInstallerBase(t.Context(), opts, filepath.Join(dir, "work3")), "grub-probe")
}
