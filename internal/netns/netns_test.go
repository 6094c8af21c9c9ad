package netns

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCheckName(t *testing.T) {
	t.Parallel()

	for _, ok := range []string{"anvil-lab", "x", "a.b", strings.Repeat("n", 255)} {
		assert.NoError(t, checkName(ok), ok)
	}

	for _, bad := range []string{"", ".", "..", "a/b", "../x", "a\x00b", strings.Repeat("n", 256)} {
		assert.Error(t, checkName(bad), "%q", bad)
		assert.False(t, Exists(bad), "%q", bad)
	}
}

func TestRefusesBadNames(t *testing.T) {
	t.Parallel()

	assert.Error(t, Create("../etc"))
	assert.Error(t, Delete("a/b"))
	assert.Error(t, Do("", func() error { return nil }))

	_, err := OpenLinks("")
	assert.Error(t, err)
}

func TestArgv(t *testing.T) {
	t.Parallel()

	assert.Equal(t, []string{"ip", "netns", "exec", "lab", "dnsmasq", "-k"}, Argv("lab", "dnsmasq", "-k"))
	assert.Equal(t, []string{"dnsmasq", "-k"}, Argv("", "dnsmasq", "-k"), "the caller's namespace")

	cmd := Command(t.Context(), "lab", "qemu", "-name", "x")
	assert.Equal(t, []string{"ip", "netns", "exec", "lab", "qemu", "-name", "x"}, cmd.Args)

	cmd = Command(t.Context(), "", "qemu", "-name", "x")
	assert.Equal(t, []string{"qemu", "-name", "x"}, cmd.Args)
}

func TestPath(t *testing.T) {
	t.Parallel()

	assert.Equal(t, "/run/netns/lab", Path("lab"))
}
