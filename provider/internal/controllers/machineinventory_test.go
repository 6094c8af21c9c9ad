package controllers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestUnchangedInventory(t *testing.T) {
	t.Parallel()

	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := func(serial string, reported time.Time) *resources.MachineInventorySpec {
		return &resources.MachineInventorySpec{
			System: resources.SystemInventory{Serial: serial}, ReportedAt: reported,
			Disks: []resources.DiskInventory{{Name: "sda", Size: 1 << 40}},
		}
	}

	for _, tc := range []struct {
		name           string
		stored, report *resources.MachineInventorySpec
		unchanged      bool
	}{
		{"the same, reported again soon", spec("A", at), spec("A", at.Add(time.Minute)), true},
		{"the same, reported long after", spec("A", at), spec("A", at.Add(2*time.Hour)), false},
		{"changed", spec("A", at), spec("B", at.Add(time.Minute)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			require.Equal(t, tc.unchanged, unchangedInventory(tc.stored, tc.report))
		})
	}
}
