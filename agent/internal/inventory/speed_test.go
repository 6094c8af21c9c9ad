package inventory

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFillSpeed: the speed and duplex a link negotiated, as sysfs says them; a link that
// is down (sysfs refuses the read) or cannot tell (-1) has none.
func TestFillSpeed(t *testing.T) {
	t.Parallel()

	root := t.TempDir()

	for name, files := range map[string]map[string]string{
		"eth0": {"speed": "1000\n", "duplex": "full\n"},
		"eth1": {"speed": "-1\n", "duplex": "unknown\n"},
		"eth2": {"speed": "25000\n", "duplex": "half\n"},
		"eth3": {},
	} {
		dir := filepath.Join(root, "class", "net", name)
		require.NoError(t, os.MkdirAll(dir, 0o755))

		for f, content := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644))
		}
	}

	ctrl := &LinksController{SysfsRoot: root}

	for _, tc := range []struct {
		name   string
		speed  int
		duplex nethelpers.Duplex
	}{
		{"eth0", 1000, nethelpers.Full},
		{"eth1", 0, nethelpers.Unknown},
		{"eth2", 25000, nethelpers.Half},
		{"eth3", 0, nethelpers.Unknown},
	} {
		var spec network.LinkStatusSpec

		ctrl.fillSpeed(&spec, tc.name)
		assert.Equal(t, tc.speed, spec.SpeedMegabits, tc.name)
		assert.Equal(t, tc.duplex, spec.Duplex, tc.name)
	}
}
