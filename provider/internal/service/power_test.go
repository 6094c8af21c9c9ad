package service

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestNewPowerController(t *testing.T) {
	t.Parallel()

	policy, err := parsePolicy(DefaultOptions)
	require.NoError(t, err)
	assert.Equal(t, resources.PowerOff, policy.IdlePower)

	ctrl, err := newPowerController(DefaultOptions, policy, nil)
	require.NoError(t, err)
	assert.Equal(t, policy, ctrl.Policy)
	assert.Equal(t, power.BootModeAuto, ctrl.BootMode)
	assert.Equal(t, 30*time.Second, ctrl.PollInterval)
	assert.Equal(t, time.Minute, ctrl.MinActionInterval)

	for _, kind := range []power.Backend{power.BackendIPMI, power.BackendRedfish, power.BackendAPI} {
		assert.Contains(t, ctrl.Dialers, kind)
	}

	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"idle on", func(o *Options) { o.PowerIdleDefault = "on" }, ""},
		{"uefi", func(o *Options) { o.IPMIPXEBootMode = "uefi" }, ""},
		{"idle sideways", func(o *Options) { o.PowerIdleDefault = "sideways" }, "--power-idle-default"},
		{"boot mode", func(o *Options) { o.IPMIPXEBootMode = "efi" }, "--ipmi-pxe-boot-mode"},
		{"no concurrency", func(o *Options) { o.PowerConcurrency = 0 }, "must be positive"},
		{"redfish when available", func(o *Options) { o.RedfishUseWhenAvailable = true }, ""},
		{"redfish port", func(o *Options) { o.RedfishUseAlways, o.RedfishPort = true, 70000 }, "--redfish-port"},
		{"negative interval", func(o *Options) { o.MinRebootInterval = -time.Second }, "not negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			opts := DefaultOptions
			tc.change(&opts)

			policy, err := parsePolicy(opts)
			if err == nil {
				_, err = newPowerController(opts, policy, nil)
			}

			if tc.want == "" {
				assert.NoError(t, err)

				return
			}

			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
