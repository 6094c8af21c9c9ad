package health_test

import (
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/health"
	"github.com/anvil-metal/anvil/agent/internal/nvme"
)

// logPage reads a health log page from testdata (hex, as `nvme smart-log -b | xxd -p`
// prints one).
func logPage(t *testing.T, name string) []byte {
	t.Helper()

	text, err := os.ReadFile(filepath.Join("testdata", name+".hex"))
	require.NoError(t, err)

	b, err := hex.DecodeString(strings.Join(strings.Fields(string(text)), ""))
	require.NoError(t, err)

	return b
}

// TestCheckNVMe: media errors, wear and spare cannot be injected into QEMU's NVMe
// controller (only its critical warning can), so they are judged on log pages.
func TestCheckNVMe(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		page        string
		th          health.Thresholds
		want        health.Status
		wantReasons []string
		wantFacts   []string
	}{
		{
			page: "pm9a3-healthy", th: health.DefaultThresholds, want: health.Passed,
			wantFacts: []string{"3% used", "spare 100% (threshold 10%)", "0 media errors", "37 °C", "14203 power-on hours"},
		},
		{
			page: "worn-out", th: health.DefaultThresholds, want: health.Failed,
			wantReasons: []string{"critical warning: available spare below its threshold", "104% of its life used (at most 90% passes)"},
		},
		{
			page: "media-errors", th: health.DefaultThresholds, want: health.Failed,
			wantReasons: []string{"critical warning: reliability degraded by media or internal errors", "12 media errors (at most 0 pass)"},
		},
		{page: "media-errors", th: health.Thresholds{MaxPercentUsed: 90, MaxMediaErrors: 20}, want: health.Failed, wantReasons: []string{"critical warning: reliability degraded"}},
		{page: "qemu-temperature-warning", th: health.DefaultThresholds, want: health.Failed, wantReasons: []string{"critical warning: temperature beyond a threshold"}},
		{page: "counter-overflow", th: health.Thresholds{MaxPercentUsed: 90, MaxMediaErrors: math.MaxUint64 - 1}, want: health.Failed, wantReasons: []string{"18446744073709551615 media errors"}},
	} {
		t.Run(tc.page, func(t *testing.T) {
			t.Parallel()

			log, err := health.ParseNVMeLog(logPage(t, tc.page))
			require.NoError(t, err)

			c := health.CheckNVMe("disk nvme0n1", log, tc.th)
			assert.Equal(t, tc.want, c.Status, c.String())

			for i, want := range tc.wantReasons {
				require.Greater(t, len(c.Reasons), i, c.String())
				assert.Contains(t, c.Reasons[i], want)
			}

			if tc.want == health.Passed {
				assert.Empty(t, c.Reasons)
			}

			for _, f := range tc.wantFacts {
				assert.Contains(t, c.Facts, f)
			}
		})
	}

	_, err := health.ParseNVMeLog(make([]byte, 100))
	assert.ErrorContains(t, err, "NVMe health log is 100 bytes, want 512")
}

func TestOverall(t *testing.T) {
	t.Parallel()

	passed := health.Check{Status: health.Passed}
	failed := health.Check{Status: health.Failed}

	assert.Equal(t, health.Passed, health.Overall([]health.Check{passed, passed}))
	assert.Equal(t, health.Failed, health.Overall([]health.Check{passed, health.NoSMART("disk vda", "virtio"), failed}))
	assert.Equal(t, health.Unknown, health.Overall([]health.Check{passed, health.NoSMART("disk vda", "virtio")}), "a disk without SMART is not a pass")
	assert.Equal(t, health.Unknown, health.Overall(nil), "nothing checked is not a pass")
	assert.Equal(t, "disk vda: SMART unknown (a virtio disk offers no SMART or NVMe health log)", health.NoSMART("disk vda", "virtio").String())
}

// pageDevice answers Get Log Page with a captured page.
type pageDevice struct {
	page []byte
	err  error
}

func (d *pageDevice) NamespaceID() (uint32, error) { return 1, nil }

func (d *pageDevice) Admin(cmd *nvme.Command, data []byte) error {
	if d.err != nil {
		return d.err
	}

	if cmd.Opcode != nvme.OpGetLogPage || cmd.CDW10&0xff != 0x02 || cmd.NSID != nvme.GlobalNSID {
		return &nvme.StatusError{Op: "?", Status: 0x0002}
	}

	copy(data, d.page)

	return nil
}

func TestReadNVMeLog(t *testing.T) {
	t.Parallel()

	log, err := health.ReadNVMeLog(&pageDevice{page: logPage(t, "media-errors")})
	require.NoError(t, err)
	assert.Equal(t, uint64(12), log.MediaErrors)
	assert.Equal(t, uint8(41), log.PercentUsed)

	_, err = health.ReadNVMeLog(&pageDevice{err: &nvme.StatusError{Op: "Get Log Page", Status: 0x0109}})
	assert.ErrorContains(t, err, "error reading the NVMe health log: NVMe Get Log Page failed")

	c := health.CheckNVMeDevice("disk nvme9n1", filepath.Join(t.TempDir(), "nvme9n1"), health.DefaultThresholds)
	assert.Equal(t, health.Unknown, c.Status, "a log that cannot be read is not a pass")
}

func TestReadTest(t *testing.T) {
	t.Parallel()

	disk := filepath.Join(t.TempDir(), "disk")
	require.NoError(t, os.WriteFile(disk, nil, 0o600))
	require.NoError(t, os.Truncate(disk, 64<<20))

	budget := health.ReadBudget{Samples: 16, SampleSize: 1 << 20, Timeout: time.Minute}

	c := health.ReadTest(t.Context(), "disk vdb", disk, 64<<20, budget)
	assert.Equal(t, health.Passed, c.Status, c.String())
	assert.Contains(t, c.Facts[0], "16 of 16 samples of 1024 KiB read")

	// A directory fails every read: the reads' errors fail the check, a few listed.
	c = health.ReadTest(t.Context(), "disk vdc", t.TempDir(), 64<<20, budget)
	assert.Equal(t, health.Failed, c.Status)
	assert.Len(t, c.Reasons, 8, "it stops after a few errors")
	assert.Contains(t, c.Reasons[0], "read error at byte 0")

	// No time at all: nothing covered, which is not a pass.
	budget.Timeout = 0
	c = health.ReadTest(t.Context(), "disk vdb", disk, 64<<20, budget)
	assert.Equal(t, health.Unknown, c.Status)
	assert.Contains(t, c.Reasons[0], "only 0 of 16 samples read")

	c = health.ReadTest(t.Context(), "disk vdd", filepath.Join(t.TempDir(), "gone"), 1<<20, health.DefaultReadBudget)
	assert.Equal(t, health.Unknown, c.Status)
}
