package labtest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPatternReads(t *testing.T) {
	t.Parallel()

	const mib = 1 << 20

	for _, tc := range []struct {
		name    string
		off, n  int64
		pattern string
		want    []string
	}{
		{"empty", 0, 0, "0", nil},
		{"small", 64 * mib, 4096, "0xa5", []string{"-c", "read -P 0xa5 67108864 4096"}},
		{"exactly one read", 0, 512 * mib, "0", []string{"-c", "read -P 0 0 536870912"}},
		{
			"1 GiB in two", 0, 1 << 30, "0",
			[]string{"-c", "read -P 0 0 536870912", "-c", "read -P 0 536870912 536870912"},
		},
		{
			"uneven tail from an offset", mib, 512*mib + 4096, "0",
			[]string{"-c", "read -P 0 1048576 536870912", "-c", "read -P 0 537919488 4096"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, patternReads(tc.pattern, tc.off, tc.n))
		})
	}
}

func TestOwedWipe(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		out  string
		err  error
		want string
	}{
		{"owed", "spec:\n  acceptance: accepted\n  wipeID: w-2\n", nil, "w-2"},
		{"none asked", "spec:\n  acceptance: pending\n", nil, ""},
		{"unreadable", "error: not found\n", errors.New("exit status 1"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			var asked []string

			ctl := func(args ...string) (string, error) {
				asked = args

				return tc.out, tc.err
			}

			assert.Equal(t, tc.want, OwedWipe(ctl, "uuid-1"))
			assert.Equal(t, []string{"get", "intent", "uuid-1", "-o", "yaml"}, asked)
		})
	}
}

// A value YAML would read as a number comes quoted; HasField finds it either way.
func TestHasField(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		y, key, value string
		want          bool
	}{
		{"mac: 52:54:00:8a:0b:1c\n", "mac", "52:54:00:8a:0b:1c", true},
		{"mac: '52:54:00:05:50:40'\n", "mac", "52:54:00:05:50:40", true},
		{"wipedID: \"1234e567\"\n", "wipedID", "1234e567", true},
		{"wipedID: 1234e568\n", "wipedID", "1234e567", false},
		{"macs:\n  - 52:54:00:05:50:40\n", "mac", "52:54:00:05:50:40", false},
	} {
		assert.Equal(t, tc.want, HasField(tc.y, tc.key, tc.value), tc.y)
	}
}
