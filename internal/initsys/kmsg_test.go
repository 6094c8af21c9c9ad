package initsys_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/internal/initsys"
)

// fakeKmsg keeps each write as one record and refuses long ones, as /dev/kmsg does.
type fakeKmsg struct {
	mu      sync.Mutex
	records []string
	max     int
}

func (f *fakeKmsg) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()

	if len(p) > f.max {
		return 0, syscall.EINVAL
	}

	f.records = append(f.records, string(p))

	return len(p), nil
}

func TestKernelLog(t *testing.T) {
	t.Parallel()

	long := "X " + strings.Repeat("y", 100) + "\n"

	for _, tc := range []struct {
		name         string
		writes       []string
		wantRecords  []string
		wantFallback string
	}{
		{
			name:        "a line per write",
			writes:      []string{"one\n", "two\n"},
			wantRecords: []string{"<13>one\n", "<13>two\n"},
		},
		{
			name:        "lines split across writes and joined in one",
			writes:      []string{"TALOS-STANDIN sche", "matic=abc\nTALOS-STANDIN installed\nrest"},
			wantRecords: []string{"<13>TALOS-STANDIN schematic=abc\n", "<13>TALOS-STANDIN installed\n"},
		},
		{
			name:         "a line too long for a record goes to the fallback",
			writes:       []string{"short\n", long, "after\n"},
			wantRecords:  []string{"<13>short\n", "<13>after\n"},
			wantFallback: long,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			kmsg := &fakeKmsg{max: 64}

			var fallback bytes.Buffer

			k := initsys.NewKernelLog(kmsg, initsys.PriorityNotice, &fallback)

			for _, w := range tc.writes {
				n, err := k.Write([]byte(w))
				require.NoError(t, err)
				assert.Equal(t, len(w), n)
			}

			assert.Equal(t, tc.wantRecords, kmsg.records)
			assert.Equal(t, tc.wantFallback, fallback.String())
		})
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("console gone") }

func TestKernelLogBothFail(t *testing.T) {
	t.Parallel()

	k := initsys.NewKernelLog(&fakeKmsg{max: 0}, initsys.PriorityInfo, failing{})

	_, err := k.Write([]byte("line\n"))
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.EINVAL)
	assert.Contains(t, err.Error(), "console gone")

	// The line is dropped, not retried with the next.
	_, err = k.Write([]byte("next"))
	assert.NoError(t, err)
}

func TestKernelLogger(t *testing.T) {
	t.Parallel()

	kmsg := &fakeKmsg{max: 1024}

	log := initsys.NewKernelLogger(zapcore.InfoLevel, kmsg, failing{})
	log.Debug("not shown")
	log.Named("modules").Info("loaded kernel module", zap.String("module", "virtio_net"))
	log.Warn("no lease", zap.Error(errors.New("timeout")))
	log.Error("wipe failed")
	require.NoError(t, log.Sync())

	// The kernel stamps the time; each level has its priority.
	assert.Equal(t, []string{
		"<14>INFO  modules loaded kernel module {\"module\": \"virtio_net\"}\n",
		"<12>WARN  no lease {\"error\": \"timeout\"}\n",
		"<11>ERROR wipe failed\n",
	}, kmsg.records)
}
