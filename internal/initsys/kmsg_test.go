package initsys_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/initsys"
)

// fakeKmsg keeps each write as one record and refuses long ones, as /dev/kmsg does.
type fakeKmsg struct {
	records []string
	max     int
	closed  bool
}

func (f *fakeKmsg) Write(p []byte) (int, error) {
	if len(p) > f.max {
		return 0, syscall.EINVAL
	}

	f.records = append(f.records, string(p))

	return len(p), nil
}

func (f *fakeKmsg) Close() error {
	f.closed = true

	return nil
}

func TestKernelLog(t *testing.T) {
	t.Parallel()

	long := "X " + string(bytes.Repeat([]byte("y"), 100)) + "\n"

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
			writes:      []string{"TALOS-STANDIN sche", "matic=abc\nTALOS-STANDIN installed\nlast"},
			wantRecords: []string{"<13>TALOS-STANDIN schematic=abc\n", "<13>TALOS-STANDIN installed\n", "<13>last\n"},
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

			k := initsys.NewKernelLog(kmsg, &fallback)

			for _, w := range tc.writes {
				n, err := k.Write([]byte(w))
				require.NoError(t, err)
				assert.Equal(t, len(w), n)
			}

			require.NoError(t, k.Close())
			assert.True(t, kmsg.closed)
			assert.Equal(t, tc.wantRecords, kmsg.records)
			assert.Equal(t, tc.wantFallback, fallback.String())
		})
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("console gone") }

func TestKernelLogBothFail(t *testing.T) {
	t.Parallel()

	k := initsys.NewKernelLog(&fakeKmsg{max: 0}, failing{})

	_, err := k.Write([]byte("line\n"))
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.EINVAL)
	assert.Contains(t, err.Error(), "console gone")
}
