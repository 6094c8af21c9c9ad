package health

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSampleOffsets(t *testing.T) {
	t.Parallel()

	const mib = 1 << 20

	for _, tc := range []struct {
		name    string
		size    uint64
		n       int
		want    []uint64
		wantLen int
	}{
		{name: "spread, first and last", size: 100 * mib, n: 3, want: []uint64{0, 49*mib + mib/2, 99 * mib}},
		{name: "smaller than a sample", size: mib / 2, n: 8, want: []uint64{0}},
		{name: "fewer samples than asked where they would overlap", size: 4 * mib, n: 100, wantLen: 4},
		{name: "nothing", size: 0, n: 8},
		{name: "one", size: 10 * mib, n: 1, want: []uint64{9 * mib}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got := sampleOffsets(tc.size, tc.n, mib)
			if tc.want != nil {
				assert.Equal(t, tc.want, got)
			}

			if tc.wantLen > 0 {
				assert.Len(t, got, tc.wantLen)
			}

			for _, off := range got {
				assert.LessOrEqual(t, off+min(mib, tc.size), tc.size, "within the disk")
				assert.Zero(t, off%4096, "aligned")
			}
		})
	}
}
