package tftp

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func rrq(fields ...string) []byte {
	b := []byte{0, 1}
	for _, f := range fields {
		b = append(append(b, f...), 0)
	}

	return b
}

func TestParseRequest(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		pkt     []byte
		want    *Request
		wantErr string
	}{
		{
			name: "plain",
			pkt:  rrq("undionly.kpxe", "octet"),
			want: &Request{Filename: "undionly.kpxe", Mode: "octet"},
		},
		{
			name: "options, names and mode lower-cased",
			pkt:  rrq("ipxe.efi", "OCTET", "BLKSIZE", "1468", "tsize", "0", "WindowSize", "8"),
			want: &Request{Filename: "ipxe.efi", Mode: "octet", Options: []Option{
				{"blksize", "1468"}, {"tsize", "0"}, {"windowsize", "8"},
			}},
		},
		{
			name: "write",
			pkt:  append([]byte{0, 2}, rrq("x", "octet")[2:]...),
			want: &Request{Write: true, Filename: "x", Mode: "octet"},
		},
		{name: "empty", pkt: nil, wantErr: "short packet"},
		{name: "one byte", pkt: []byte{0}, wantErr: "short packet"},
		{name: "data opcode", pkt: []byte{0, 3, 0, 1}, wantErr: "opcode 3 is not a request"},
		{name: "opcode only", pkt: []byte{0, 1}, wantErr: "not NUL-terminated"},
		{name: "no terminating NUL", pkt: []byte("\x00\x01file\x00octet"), wantErr: "not NUL-terminated"},
		{name: "no mode", pkt: rrq("file"), wantErr: "without a mode"},
		{name: "empty name", pkt: rrq("", "octet"), wantErr: "empty file name"},
		{name: "unknown mode", pkt: rrq("f", "binary"), wantErr: `unknown mode "binary"`},
		{name: "option without value", pkt: rrq("f", "octet", "blksize"), wantErr: `option "blksize" without a value`},
		{name: "empty option name", pkt: rrq("f", "octet", "", "1"), wantErr: "empty option name"},
		{name: "option twice", pkt: rrq("f", "octet", "blksize", "512", "BLKSIZE", "1468"), wantErr: `option "blksize" sent twice`},
		{name: "too long", pkt: rrq(strings.Repeat("a", 3000), "octet"), wantErr: "request longer than 2048 bytes"},
		{name: "long mode quoted short", pkt: rrq("f", strings.Repeat("m", 100)), wantErr: `unknown mode "mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm..."`},
		{name: "binary mode quoted printable", pkt: rrq("f", "oc\xae\x01t"), wantErr: `unknown mode "oc??t"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, err := ParseRequest(tc.pkt)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Nil(t, got)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestPacketRoundTrip(t *testing.T) {
	t.Parallel()

	opts := []Option{{"blksize", "1468"}, {"windowsize", "16"}}

	req, err := ParseRequest(appendRequest(nil, "efi/ipxe.efi", "octet", opts))
	require.NoError(t, err)
	assert.Equal(t, &Request{Filename: "efi/ipxe.efi", Mode: "octet", Options: opts}, req)

	oack := appendOACK(nil, opts)
	assert.Equal(t, []byte{0, 6}, oack[:2])

	got, err := parseOACK(oack[2:])
	require.NoError(t, err)
	assert.Equal(t, opts, got)

	_, err = parseOACK([]byte("blksize\x00"))
	require.Error(t, err)

	_, err = parseOACK([]byte("blksize\x001468"))
	require.Error(t, err)

	e := parseError(appendError(nil, ErrCodeNotFound, "file not found")[2:])
	assert.Equal(t, &RemoteError{Code: ErrCodeNotFound, Message: "file not found"}, e)
	assert.Equal(t, &RemoteError{Code: ErrCodeUndefined, Message: "(short error packet)"}, parseError([]byte{0}))

	assert.Equal(t, []byte{0, 4, 0xff, 0xff}, appendACK(nil, 65535))
}
