//go:build lab

package chaos

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGridChecks checks the grid's own judgements on made-up machines: a checker that
// passes everything would make the grid pass everything.
func TestGridChecks(t *testing.T) {
	t.Parallel()

	const doc = `{"id": "m", "intent": {"acceptance": "accepted", "wipeID": "w2",
		"allocation": {"id": "a1", "schematicID": "s1"}, "labels": {"chaos.example.com/cell": "x"}},
		"status": {"wipedID": "w2", "installedAllocation": "a1", "bmcOrder": "bmc-provision",
		"lastWipe": {"id": "w2", "disks": [{"device": "/dev/sda"}, {"device": "/dev/sdb"}]}}}`

	var v machineView
	require.NoError(t, json.Unmarshal([]byte(doc), &v))
	assert.Equal(t, "a1", v.allocation())
	assert.Equal(t, "s1", v.Intent.Allocation.SchematicID)
	assert.True(t, v.wiped())
	require.NotNil(t, v.Status.LastWipe)
	assert.Len(t, v.Status.LastWipe.Disks, 2)
	assert.Equal(t, "bmc-provision", v.Status.BMCOrder)

	wiped := func(owed, done string) machineView {
		var m machineView
		m.Intent.Acceptance, m.Intent.WipeID, m.Status.WipedID = "accepted", owed, done

		return m
	}

	for _, tc := range []struct {
		name string
		v    machineView
		r    machineRecord
		ok   bool
	}{
		{name: "ready", v: wiped("w", "w"), r: machineRecord{wipesDone: map[string]int{"w": 1}}, ok: true},
		{name: "wipe owed", v: wiped("w2", "w1"), r: machineRecord{wipesDone: map[string]int{"w1": 1}}},
		{name: "never asked", v: wiped("", ""), r: machineRecord{}},
		{name: "wiped twice", v: wiped("w", "w"), r: machineRecord{wipesDone: map[string]int{"w": 2}}},
		{name: "recorded, never finished", v: wiped("w", "w"), r: machineRecord{wipesDone: map[string]int{}}},
		{name: "still on", v: wiped("w", "w"), r: machineRecord{on: true, wipesDone: map[string]int{"w": 1}}},
		{name: "pending", v: machineView{}, r: machineRecord{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.ok, readyAgain(tc.v, tc.r) == "", readyAgain(tc.v, tc.r))
		})
	}

	assert.Equal(t, "allocated--Talos-booting", (&cell{name: "allocated (Talos booting)"}).slug())
	assert.Equal(t, 2, count([]string{bootAgent, bootTalos, bootAgent}, bootAgent))
}
