package fuzzcorpus_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/fuzzcorpus"
)

func TestMarshal(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		values  []any
		want    string
		wantErr string
	}{
		{"bytes", []any{[]byte{0, 1, 'a', 0xff}}, "go test fuzz v1\n[]byte(\"\\x00\\x01a\\xff\")\n", ""},
		{"string and bool", []any{"uuid=\"x\"\n", true}, "go test fuzz v1\nstring(\"uuid=\\\"x\\\"\\n\")\nbool(true)\n", ""},
		{"byte", []any{byte(7), byte('a')}, "go test fuzz v1\nbyte('\\a')\nbyte('a')\n", ""},
		{"ints", []any{3, uint16(4), uint32(5), int64(-6)}, "go test fuzz v1\nint(3)\nuint16(4)\nuint32(5)\nint64(-6)\n", ""},
		{"unsupported", []any{1.5}, "", "unsupported fuzz argument type float64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, err := fuzzcorpus.Marshal(tc.values...)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
		})
	}
}
