package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseCmdline(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		cmdline string
		want    map[string]string
	}{
		{"", map[string]string{}},
		{"console=tty0 quiet a=b=c", map[string]string{"console": "tty0", "quiet": "", "a": "b=c"}},
		{"x=1 x=2", map[string]string{"x": "2"}},
	} {
		assert.Equal(t, tc.want, parseCmdline(tc.cmdline), tc.cmdline)
	}
}
