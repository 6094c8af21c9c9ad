package tftp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNegotiate(t *testing.T) {
	t.Parallel()

	lim := limits{maxBlockSize: 1468, maxWindowSize: 64}

	for _, tc := range []struct {
		name    string
		opts    []Option
		want    params
		wantErr string
	}{
		{name: "none: RFC 1350, no OACK", want: params{blockSize: 512, windowSize: 1}},
		{
			name: "blksize taken",
			opts: []Option{{"blksize", "1468"}},
			want: params{blockSize: 1468, windowSize: 1, oack: []Option{{"blksize", "1468"}}},
		},
		{
			name: "blksize lowered to the limit",
			opts: []Option{{"blksize", "65464"}},
			want: params{blockSize: 1468, windowSize: 1, oack: []Option{{"blksize", "1468"}}},
		},
		{
			name: "smallest blksize",
			opts: []Option{{"blksize", "8"}},
			want: params{blockSize: 8, windowSize: 1, oack: []Option{{"blksize", "8"}}},
		},
		{name: "blksize too small", opts: []Option{{"blksize", "7"}}, wantErr: `invalid blksize value "7": want 8 to 65464`},
		{name: "blksize too large", opts: []Option{{"blksize", "65465"}}, wantErr: "invalid blksize"},
		{name: "blksize not a number", opts: []Option{{"blksize", "big"}}, wantErr: `invalid blksize value "big"`},
		{name: "blksize signed", opts: []Option{{"blksize", "+512"}}, wantErr: "invalid blksize"},
		{name: "blksize empty", opts: []Option{{"blksize", ""}}, wantErr: "invalid blksize"},
		{
			name: "windowsize taken",
			opts: []Option{{"windowsize", "16"}},
			want: params{blockSize: 512, windowSize: 16, oack: []Option{{"windowsize", "16"}}},
		},
		{
			name: "windowsize lowered to the limit",
			opts: []Option{{"windowsize", "65535"}},
			want: params{blockSize: 512, windowSize: 64, oack: []Option{{"windowsize", "64"}}},
		},
		{name: "windowsize zero", opts: []Option{{"windowsize", "0"}}, wantErr: `invalid windowsize value "0": want 1 to 65535`},
		{name: "windowsize too large", opts: []Option{{"windowsize", "65536"}}, wantErr: "invalid windowsize"},
		{
			name: "timeout taken as sent",
			opts: []Option{{"timeout", "5"}},
			want: params{blockSize: 512, windowSize: 1, timeout: 5 * time.Second, oack: []Option{{"timeout", "5"}}},
		},
		{
			name: "timeout at the cap taken",
			opts: []Option{{"timeout", "5"}, {"blksize", "1468"}},
			want: params{blockSize: 1468, windowSize: 1, timeout: 5 * time.Second, oack: []Option{{"timeout", "5"}, {"blksize", "1468"}}},
		},
		{
			// A client may not hold its slot for 255 s a retry: the option is not
			// acknowledged, the server's own timeout applies.
			name: "timeout above the cap ignored",
			opts: []Option{{"timeout", "6"}, {"blksize", "1468"}},
			want: params{blockSize: 1468, windowSize: 1, oack: []Option{{"blksize", "1468"}}},
		},
		{
			name: "largest timeout ignored",
			opts: []Option{{"timeout", "255"}},
			want: params{blockSize: 512, windowSize: 1},
		},
		{name: "timeout zero", opts: []Option{{"timeout", "0"}}, wantErr: "invalid timeout"},
		{name: "timeout too long", opts: []Option{{"timeout", "256"}}, wantErr: "invalid timeout"},
		{
			name: "tsize answered with the size",
			opts: []Option{{"tsize", "0"}},
			want: params{blockSize: 512, windowSize: 1, oack: []Option{{"tsize", "850528"}}},
		},
		{name: "tsize from a reader must be 0", opts: []Option{{"tsize", "12"}}, wantErr: "invalid tsize"},
		{
			name: "unknown options ignored",
			opts: []Option{{"multicast", ""}, {"rollover", "0"}},
			want: params{blockSize: 512, windowSize: 1},
		},
		{
			name: "all, in the order asked",
			opts: []Option{{"tsize", "0"}, {"windowsize", "8"}, {"utimeout", "1000"}, {"blksize", "1468"}, {"timeout", "1"}},
			want: params{blockSize: 1468, windowSize: 8, timeout: time.Second, oack: []Option{
				{"tsize", "850528"}, {"windowsize", "8"}, {"blksize", "1468"}, {"timeout", "1"},
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, err := negotiate(&Request{Filename: "ipxe.efi", Mode: "octet", Options: tc.opts}, 850528, lim)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
