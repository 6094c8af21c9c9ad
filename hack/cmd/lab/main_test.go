package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestBadInput: what the lab cannot do is refused with a clear error before anything
// is touched (no root, no lab needed).
func TestBadInput(t *testing.T) {
	dir := t.TempDir()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"machine", "add", "--firmware", "coreboot"}, `unknown firmware "coreboot"`},
		{[]string{"machine", "add", "--bmc", "redfish"}, `unknown power owner "redfish"`},
		{[]string{"machine", "add", "--bmc", "none", "--register-bmc=false"}, "no BMC to give"},
		{[]string{"machine", "add"}, "no lab in " + dir + " (lab up first)"},
		{[]string{"machine", "bmc", "bios-0"}, "no lab in " + dir},
		{[]string{"provider", "restart"}, "no lab in " + dir},
		{[]string{"up", "--bmc-elsewhere", "none"}, "--bmc-elsewhere: a machine whose power owner is none has no BMC to give"},
		{[]string{"up", "--bmc-elsewhere", "redfish"}, `--bmc-elsewhere: unknown power owner "redfish"`},
	} {
		cmd := newRootCmd()
		cmd.SetArgs(append([]string{"--dir", dir}, tc.args...))

		var out bytes.Buffer

		cmd.SetOut(&out)
		cmd.SetErr(&out)

		assert.ErrorContains(t, cmd.ExecuteContext(t.Context()), tc.want, "%v", tc.args)
	}
}
