package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/siderolabs/go-smbios/smbios"
	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/agent/internal/inventory"
)

// TestWaitFirstPass: a snapshot taken after WaitFirstPass holds what every collector
// found, however slow; a collector that hangs is named late once the wait times out,
// and the others' findings are there.
func TestWaitFirstPass(t *testing.T) {
	t.Parallel()

	const slow = 300 * time.Millisecond

	for _, tc := range []struct {
		name string
		// source changes the test's sources; a hanging one waits for release, closed
		// when the test ends.
		source  func(src *inventory.Sources, release <-chan struct{})
		timeout time.Duration
		// minWait is how long the wait must at least take.
		minWait  time.Duration
		wantLate []string
		check    func(t *testing.T, inv *inventory.Inventory)
	}{
		{
			name: "slow disks are waited for",
			source: func(src *inventory.Sources, _ <-chan struct{}) {
				src.Disks = func(context.Context, *zap.Logger) ([]inventory.Disk, error) {
					time.Sleep(slow)

					return []inventory.Disk{{ID: "sda"}, {ID: "nvme0n1"}}, nil
				}
			},
			timeout: time.Minute,
			minWait: slow,
			check: func(t *testing.T, inv *inventory.Inventory) {
				assert.Len(t, inv.Disks, 2)
			},
		},
		{
			name: "a source that fails has done its pass",
			source: func(src *inventory.Sources, _ <-chan struct{}) {
				src.Disks = func(context.Context, *zap.Logger) ([]inventory.Disk, error) {
					return nil, errors.New("no sysfs")
				}
			},
			timeout: time.Minute,
			check: func(t *testing.T, inv *inventory.Inventory) {
				assert.Empty(t, inv.Disks)
			},
		},
		{
			name: "slow SMBIOS is waited for",
			source: func(src *inventory.Sources, _ <-chan struct{}) {
				src.SMBIOS = func() ([]byte, smbios.Version, error) {
					time.Sleep(slow)

					return nil, smbios.Version{}, errors.New("no SMBIOS in this test")
				}
			},
			timeout: time.Minute,
			minWait: slow,
			check: func(t *testing.T, inv *inventory.Inventory) {
				assert.Len(t, inv.MemoryModules, 1, "the meminfo fallback, after SMBIOS failed")
			},
		},
		{
			name: "hanging disks are late, the rest is there",
			source: func(src *inventory.Sources, release <-chan struct{}) {
				src.Disks = func(ctx context.Context, _ *zap.Logger) ([]inventory.Disk, error) {
					select {
					case <-release:
					case <-ctx.Done():
					}

					return nil, errors.New("gave up")
				}
			},
			timeout:  slow,
			minWait:  slow,
			wantLate: []string{"inventory.DisksController"},
			check: func(t *testing.T, inv *inventory.Inventory) {
				assert.Empty(t, inv.Disks)
				assert.NotNil(t, inv.Hostname)
				assert.NotEmpty(t, inv.MemoryModules)
			},
		},
		{
			name: "hanging SMBIOS holds its three controllers",
			source: func(src *inventory.Sources, release <-chan struct{}) {
				src.SMBIOS = func() ([]byte, smbios.Version, error) {
					<-release

					return nil, smbios.Version{}, errors.New("gave up")
				}
			},
			timeout: slow,
			minWait: slow,
			wantLate: []string{
				"inventory.MemoryModulesController", "inventory.ProcessorsController", "inventory.SystemInformationController",
			},
			check: func(t *testing.T, inv *inventory.Inventory) {
				assert.NotNil(t, inv.Hostname)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			release := make(chan struct{})
			src := testSources(t)
			tc.source(&src, release)

			// Before the collector starts: its sources may be read before runCollector
			// returns.
			start := time.Now()

			snapshot, c := runCollector(t, src)
			// Registered after the collector's cleanup, so run before it: the runtime
			// waits for its controllers to stop.
			t.Cleanup(func() { close(release) })

			late := c.WaitFirstPass(t.Context(), tc.timeout)
			took := time.Since(start)

			assert.Equal(t, tc.wantLate, late)
			assert.GreaterOrEqual(t, took, tc.minWait)
			if tc.wantLate == nil {
				assert.Less(t, took, tc.timeout, "the wait ends when the passes do, not at the timeout")
			} else {
				assert.Less(t, took, tc.timeout+5*time.Second, "the timeout bounds the wait")
			}

			inv := snapshot()
			assert.NotNil(t, inv.Hostname)
			tc.check(t, inv)
		})
	}
}

// TestWaitFirstPassBeforeRun: a wait that starts before the collector runs still waits
// for every pass, and a canceled one returns at once with everything pending.
func TestWaitFirstPassBeforeRun(t *testing.T) {
	t.Parallel()

	st, err := inventory.NewState(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	c := inventory.NewCollector(st, testSources(t), zap.NewNop())

	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	late := c.WaitFirstPass(ctx, time.Minute)
	assert.Len(t, late, len(c.Controllers()))
	assert.Contains(t, late, "inventory.DisksController")

	assert.Len(t, c.WaitFirstPass(t.Context(), 50*time.Millisecond), len(c.Controllers()), "nothing runs yet")
}
