package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestExtensionRequested(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		args []string
		env  string
		want bool
	}{
		{"the kernel starts init without arguments", nil, "", false},
		{"flag with =", []string{"--mode=extension"}, "", true},
		{"flag and value apart", []string{"--debug", "--mode", "extension"}, "", true},
		{"initramfs flag", []string{"--mode=initramfs"}, "", false},
		{"environment", []string{"--debug"}, "extension", true},
		{"the flag wins over the environment", []string{"--mode", "initramfs"}, "extension", false},
		{"after --, not a flag", []string{"--", "--mode=extension"}, "", false},
		{"flag without its value", []string{"--mode"}, "", false},
	} {
		getenv := func(name string) string {
			if name == "ANVIL_MODE" {
				return tc.env
			}

			return ""
		}

		assert.Equal(t, tc.want, extensionRequested(tc.args, getenv), tc.name)
	}
}
