package untrusted_test

import (
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/anvil-metal/anvil/provider/internal/untrusted"
)

func TestBounded(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, in, want string
	}{
		{"a UUID, whole", "4c4c4544-0000-1000-8000-000000000001", "4c4c4544-0000-1000-8000-000000000001"},
		{"at the bound, whole", strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{"past it, cut and sized", strings.Repeat("a", 1<<20), strings.Repeat("a", 64) + "…(1048576 bytes)"},
		{"control characters", "m1\n{\"level\":\"error\"}\x1b[31m", "m1?{\"level\":\"error\"}?[31m"},
		{"invalid UTF-8", "m\xff1", "m?1"},
		{"a rune cut at the bound", strings.Repeat("a", 63) + "é", strings.Repeat("a", 63) + "?…(65 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, untrusted.Bounded(tc.in))
		})
	}
}

func TestStrings(t *testing.T) {
	t.Parallel()

	values := make([]string, 1000)
	for i := range values {
		values[i] = strings.Repeat("x", 1000)
	}

	core, logs := observer.New(zap.InfoLevel)
	zap.New(core).Info("agent connected", untrusted.Strings("macs", values))

	got, ok := logs.All()[0].ContextMap()["macs"].([]any)
	require.True(t, ok)
	require.Len(t, got, untrusted.MaxLogged+1)
	assert.Equal(t, strings.Repeat("x", 64)+"…(1000 bytes)", got[0])
	assert.Equal(t, "…(1000 values)", got[untrusted.MaxLogged])
}

func TestHardwareAddr(t *testing.T) {
	t.Parallel()

	mac := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1}
	assert.Equal(t, "52:54:00:00:00:01", untrusted.HardwareAddr("mac", mac).String)

	duid := make(net.HardwareAddr, 60000)
	assert.Equal(t, strings.Repeat("00:", 19)+"00…(60000 bytes)", untrusted.HardwareAddr("mac", duid).String)
}
