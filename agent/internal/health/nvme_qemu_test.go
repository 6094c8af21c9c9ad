//go:build lab

package health_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/health"
	"github.com/anvil-metal/anvil/internal/qemuboot"
)

// TestLabNVMeHealth boots Debian's kernel in QEMU with two NVMe drives, one of which
// reports a critical warning (QEMU's smart_critical_warning: the temperature bit), and a
// virtio disk that returns read errors (QEMU's blkdebug); disk-health, as init, reads each
// controller's health log through the kernel's passthrough and reads samples of every
// disk. The warned drive fails with the reason, the other passes; the virtio disk, which
// has no health log, is unknown there — never passed — and fails its read test.
func TestLabNVMeHealth(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	m := qemuboot.New(t, ctx, "./cmd/disk-health", "nvme", "virtio_pci", "virtio_blk")

	dir := t.TempDir()
	for _, name := range []string{"ok.img", "warned.img", "virtio.img"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
		require.NoError(t, os.Truncate(filepath.Join(dir, name), 16<<20))
	}

	// The virtio disk returns EIO for reads of sector 20480 (10 MiB in): QEMU's blkdebug.
	blkdebug := filepath.Join(dir, "blkdebug.conf")
	require.NoError(t, os.WriteFile(blkdebug, []byte("[inject-error]\nevent = \"read_aio\"\nerrno = \"5\"\nsector = \"20480\"\n"), 0o600))

	log := m.Run(t, ctx, "-- -wait 1m /dev/nvme0n1 /dev/nvme1n1 /dev/vda",
		"-drive", "file="+filepath.Join(dir, "ok.img")+",if=none,id=ok,format=raw",
		"-device", "nvme,serial=anvil-ok,drive=ok",
		"-drive", "file="+filepath.Join(dir, "warned.img")+",if=none,id=warned,format=raw",
		"-device", "nvme,serial=anvil-warned,drive=warned,smart_critical_warning=2",
		"-drive", "file=blkdebug:"+blkdebug+":"+filepath.Join(dir, "virtio.img")+",if=none,id=vd,format=raw,cache=none",
		"-device", "virtio-blk-pci,drive=vd",
	)

	checks := map[string]health.Check{}

	for _, line := range qemuboot.Lines(log, "HEALTH-CHECK") {
		var c health.Check
		require.NoError(t, json.Unmarshal([]byte(line), &c))

		checks[c.Component+": "+c.Name] = c
		t.Logf("%s %v", c, c.Facts)
	}

	require.Len(t, checks, 6, "serial log:\n%s", log)

	// The controllers probe in PCI order: the command line's.
	assert.Equal(t, health.Passed, checks["disk nvme0n1: NVMe health log"].Status)
	assert.Equal(t, health.Failed, checks["disk nvme1n1: NVMe health log"].Status)
	assert.Equal(t, []string{"critical warning: temperature beyond a threshold"}, checks["disk nvme1n1: NVMe health log"].Reasons)
	assert.Equal(t, health.Unknown, checks["disk vda: SMART"].Status, "no health log is not a pass")

	for _, disk := range []string{"nvme0n1", "nvme1n1"} {
		assert.Equal(t, health.Passed, checks["disk "+disk+": read test"].Status, "%v", checks["disk "+disk+": read test"])
	}

	read := checks["disk vda: read test"]
	assert.Equal(t, health.Failed, read.Status, "%v", read)
	require.NotEmpty(t, read.Reasons)
	assert.Contains(t, read.Reasons[0], "read error at byte")
	assert.Contains(t, read.Reasons[0], "input/output error")

	var all []health.Check
	for _, c := range checks {
		all = append(all, c)
	}

	assert.Equal(t, health.Failed, health.Overall(all))
}
