package inventory_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/siderolabs/go-smbios/smbios"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/inventory"
)

func TestFromSMBIOS(t *testing.T) {
	t.Parallel()

	table, err := os.ReadFile(filepath.Join(goSMBIOSTestdata(t), "Dell-PowerEdge-R630-Dual-Xeon.dmi"))
	require.NoError(t, err)

	inv, err := inventory.FromSMBIOS(table, smbios.Version{Major: 3, Minor: 3})
	require.NoError(t, err)
	require.Equal(t, "Dell Inc.", inv.System.TypedSpec().Manufacturer)
	require.Len(t, inv.Processors, 2)
	require.NotEmpty(t, inv.MemoryModules)

	for _, bad := range [][]byte{nil, {1, 2, 3}, make([]byte, 64)} {
		_, err = inventory.FromSMBIOS(bad, smbios.Version{Major: 3, Minor: 3})
		require.Error(t, err, "a table without a machine in it")
	}
}
