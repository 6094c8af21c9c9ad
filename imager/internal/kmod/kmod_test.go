package kmod_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/imager/internal/kmod"
	"github.com/anvil-metal/anvil/imager/internal/kmod/kmodtest"
	"github.com/anvil-metal/anvil/internal/modules"
)

func TestSelect(t *testing.T) {
	tree := kmodtest.Write(t, t.TempDir())

	ix, err := modules.Open(tree.ModulesDir)
	require.NoError(t, err)

	for _, tc := range []struct {
		name      string
		patterns  []string
		want      []string
		builtin   []string
		unmatched []string
	}{
		{name: "closure and softdep", patterns: []string{"net_a"}, want: []string{"lib_b", "lib_c", "net_a", "soft_e"}},
		{name: "dashes normalised", patterns: []string{"net-a"}, want: []string{"lib_b", "lib_c", "net_a", "soft_e"}},
		{name: "leaf", patterns: []string{"lib_c"}, want: []string{"lib_c"}},
		{name: "softdep by name", patterns: []string{"unused"}, want: []string{"lib_d", "unused"}},
		{name: "glob", patterns: []string{"lib_*"}, want: []string{"lib_b", "lib_c", "lib_d"}},
		{name: "path prefix", patterns: []string{"kernel/drivers/net/"}, want: []string{"lib_b", "lib_c", "lib_d", "net_a", "soft_e", "unused"}},
		{
			name: "built in and unknown", patterns: []string{"built_in_blk", "nothere", " ", "lib_d"},
			want: []string{"lib_d"}, builtin: []string{"built_in_blk"}, unmatched: []string{"nothere"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := kmod.Select(ix, tc.patterns)
			require.NoError(t, err)

			assert.Equal(t, tc.want, sel.Names)
			assert.Equal(t, tc.builtin, sel.Builtin)
			assert.Equal(t, tc.unmatched, sel.Unmatched)
		})
	}

	_, err = kmod.Select(ix, []string{"[bad"})
	assert.Error(t, err)
}

// TestDefaultPatternsSideroLink: the agent's initramfs carries what SideroLink needs,
// kernel WireGuard and TUN for the userspace fallback (TestBuildRealKernel checks their
// dependencies against a real kernel).
func TestDefaultPatternsSideroLink(t *testing.T) {
	for _, want := range []string{"wireguard", "tun"} {
		assert.Contains(t, kmod.DefaultPatterns, want)
	}
}

// TestDefaultPatternsTPM: the agent's initramfs has the TPM's drivers where the kernel
// has them as modules, so that the agent finds /dev/tpmrm0 and proves the machine's
// identity.
func TestDefaultPatternsTPM(t *testing.T) {
	for _, want := range []string{"tpm", "tpm_tis", "tpm_crb", "tpm_tis_spi"} {
		assert.Contains(t, kmod.DefaultPatterns, want)
	}
}

// TestSelectUnknownDependency: a module whose dependency the tree lacks cannot be shipped
// so that it loads.
func TestSelectUnknownDependency(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "modules.dep"), []byte("kernel/a.ko: kernel/b.ko kernel/ghost.ko\nkernel/b.ko:\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "modules.alias"), nil, 0o644))

	ix, err := modules.Open(dir)
	require.NoError(t, err)

	_, err = kmod.Select(ix, []string{"a"})
	assert.ErrorContains(t, err, "a needs ghost, which is neither in modules.dep nor built in")

	sel, err := kmod.Select(ix, []string{"b"})
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, sel.Names)
}

// TestIndexFiles checks the rendered index is closed: every module it names is shipped,
// under the name it is shipped as.
func TestIndexFiles(t *testing.T) {
	tree := kmodtest.Write(t, t.TempDir())

	ix, err := modules.Open(tree.ModulesDir)
	require.NoError(t, err)

	sel, err := kmod.Select(ix, []string{"net_a"})
	require.NoError(t, err)

	modules, err := sel.Modules()
	require.NoError(t, err)

	shipped := map[string]bool{}

	for _, m := range modules {
		shipped[m.Name] = true

		// Compressed modules are shipped decompressed, as plain ELF.
		assert.True(t, strings.HasSuffix(m.Name, ".ko"), m.Name)

		if m.Data != nil {
			_, err := kmod.Modinfo(m.Data)
			assert.NoError(t, err, m.Name)
		}
	}

	assert.Len(t, shipped, 4)

	files, err := sel.IndexFiles()
	require.NoError(t, err)

	byName := map[string]string{}
	for _, f := range files {
		byName[f.Name] = string(f.Data)
	}

	assert.ElementsMatch(t, []string{"modules.dep", "modules.alias", "modules.softdep", "modules.order", "modules.builtin", "modules.builtin.modinfo"}, slices.Collect(maps.Keys(byName)))

	for _, line := range strings.Split(strings.TrimSpace(byName["modules.dep"]), "\n") {
		for _, p := range strings.Fields(strings.Replace(line, ":", " ", 1)) {
			assert.True(t, shipped[p], "modules.dep names %s, which is not shipped", p)
		}
	}

	assert.Equal(t, "kernel/drivers/net/net-a.ko: kernel/lib/lib_b.ko kernel/lib/lib_c.ko\n", firstLine(byName["modules.dep"]))

	for _, line := range strings.Split(strings.TrimSpace(byName["modules.order"]), "\n") {
		assert.True(t, shipped[line], "modules.order names %s, which is not shipped", line)
	}

	assert.Contains(t, byName["modules.alias"], "alias pci:v00008086d000010D3sv*sd*bc*sc*i* net_a\n")
	assert.Contains(t, byName["modules.alias"], "alias crypto-soft-e soft_e\n")
	assert.NotContains(t, byName["modules.alias"], "unused")
	assert.Contains(t, byName["modules.softdep"], "softdep net_a pre: crypto-soft-e\n")
	assert.NotContains(t, byName["modules.softdep"], "unused")
	assert.Equal(t, "kernel/drivers/block/built-in-blk.ko\n", byName["modules.builtin"])
}

func TestFirmware(t *testing.T) {
	tree := kmodtest.Write(t, t.TempDir())

	ix, err := modules.Open(tree.ModulesDir)
	require.NoError(t, err)

	sel, err := kmod.Select(ix, []string{"net_a"})
	require.NoError(t, err)

	wanted, err := sel.Firmware()
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{
		"vendor/a.bin": {"net_a"},
		"vendor/b.bin": {"lib_b"},
		"missing.bin":  {"lib_c"},
	}, wanted)

	found, missing, err := kmod.FirmwareFiles(tree.FirmwareDir, []string{"vendor/b.bin", "missing.bin", "vendor/a.bin", "vendor/a.bin/x"})
	require.NoError(t, err)
	assert.Equal(t, []string{"missing.bin", "vendor/a.bin/x"}, missing)
	require.Len(t, found, 2)
	assert.Equal(t, kmod.File{Name: "vendor/a.bin", Source: filepath.Join(tree.FirmwareDir, "vendor/a.bin")}, found[0])
	assert.Equal(t, kmod.File{Name: "vendor/b.bin", Data: []byte("firmware b, shipped decompressed")}, found[1])

	_, _, err = kmod.FirmwareFiles(tree.FirmwareDir, []string{"../../etc/shadow"})
	assert.Error(t, err)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")

	return line + "\n"
}
