//go:build lab

package wipe_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/wipe"
	"github.com/anvil-metal/anvil/internal/qemuboot"
)

// TestLabSecureEraseNVMe boots Debian's kernel in QEMU with an emulated NVMe drive and
// wipe-disk as init, which formats the namespace with a secure erase; the data written
// on the host before must be gone from the drive's image afterwards.
func TestLabSecureEraseNVMe(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	m := qemuboot.New(t, ctx, "./cmd/wipe-disk", "nvme")

	const size = 64 << 20

	marks := []int64{0, 1 << 20, 16 << 20, size / 2, size - 4096}
	image := markedImage(t, filepath.Join(t.TempDir(), "nvme.img"), size, marks)

	log := m.Run(t, ctx, "-- -mode secure-erase -wait 2m /dev/nvme0n1",
		"-drive", "file="+image+",if=none,id=nvm,format=raw",
		"-device", "nvme,serial=anvil0001,drive=nvm",
	)

	report := findReport(t, log)
	t.Logf("report: %+v", report)
	assert.Contains(t, report.Method, "NVMe Format NVM")
	assert.Contains(t, report.Verified, "that held data before no longer do")

	for _, off := range marks {
		assert.Equal(t, make([]byte, 4096), readAt(t, image, off, 4096), "data at %d must be gone from the image; serial log:\n%s", off, log)
	}
}

// findReport reads the guest's report off its serial console, where the kernel's log
// put it (after its time stamp).
func findReport(t *testing.T, log string) wipe.Report {
	t.Helper()

	reports := qemuboot.Lines(log, "WIPE-REPORT")
	if len(reports) == 0 {
		t.Fatalf("no report from the guest; serial log:\n%s", log)
	}

	var r wipe.Report
	require.NoError(t, json.Unmarshal([]byte(reports[0]), &r))

	return r
}
