package imagecache

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeyValidate(t *testing.T) {
	t.Parallel()

	schematic := strings.Repeat("ab", 32)

	for _, tc := range []struct {
		name string
		key  Key
		err  string
	}{
		{"kernel", Key{schematic, "v1.9.0", "kernel-amd64"}, ""},
		{"arm64 initramfs", Key{schematic, "v1.10.2", "initramfs-arm64.xz"}, ""},
		{"cmdline of a pre-release", Key{schematic, "v1.11.0-beta.1", "cmdline-metal-amd64"}, ""},
		{"short schematic", Key{"abc", "v1.9.0", "kernel-amd64"}, `schematic "abc" is not 64 lowercase hex digits`},
		{"uppercase schematic", Key{strings.ToUpper(schematic), "v1.9.0", "kernel-amd64"}, "not 64 lowercase hex"},
		{"path in schematic", Key{"../" + schematic[3:], "v1.9.0", "kernel-amd64"}, "not 64 lowercase hex"},
		{"no v", Key{schematic, "1.9.0", "kernel-amd64"}, `version "1.9.0" is not a Talos version`},
		{"two parts", Key{schematic, "v1.9", "kernel-amd64"}, "is not a Talos version"},
		{"build metadata", Key{schematic, "v1.9.0+x", "kernel-amd64"}, "is not a Talos version"},
		{"empty", Key{}, "schematic"},
		{"unknown arch", Key{schematic, "v1.9.0", "kernel-riscv64"}, `file "kernel-riscv64" is not one of`},
		{"disk image", Key{schematic, "v1.9.0", "metal-amd64.raw"}, "is not one of"},
		{"other platform's cmdline", Key{schematic, "v1.9.0", "cmdline-aws-amd64"}, "is not one of"},
		{"path in file", Key{schematic, "v1.9.0", "../kernel-amd64"}, "is not one of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			err := tc.key.Validate()
			if tc.err == "" {
				require.NoError(t, err)

				return
			}

			require.ErrorIs(t, err, ErrInvalidKey)
			assert.ErrorContains(t, err, tc.err)
		})
	}
}

func TestFilesFor(t *testing.T) {
	t.Parallel()

	files, err := FilesFor("arm64")
	require.NoError(t, err)
	assert.Equal(t, []string{"kernel-arm64", "initramfs-arm64.xz", "cmdline-metal-arm64"}, files.All())

	_, err = FilesFor("x86_64")
	require.ErrorIs(t, err, ErrInvalidKey)
	assert.ErrorContains(t, err, `architecture "x86_64"`)
}
