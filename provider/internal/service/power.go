package service

import (
	"fmt"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/power/api"
	"github.com/anvil-metal/anvil/provider/internal/power/ipmi"
	"github.com/anvil-metal/anvil/provider/internal/power/redfish"
)

// powerDialers are the backends a BMC config may name; with --redfish-use-always or
// --redfish-use-when-available, IPMI BMCs are driven over Redfish (same address and
// credentials) where they speak it. Each backend's calls are timed under its own name
// (metrics may be nil), whichever config named it.
func powerDialers(opts Options, metrics *power.Metrics) power.Dialers {
	ipmiDial := metrics.Instrument(power.BackendIPMI, ipmi.Dial)
	redfishDial := metrics.Instrument(power.BackendRedfish, redfish.Dial)

	d := power.Dialers{
		power.BackendIPMI:    ipmiDial,
		power.BackendRedfish: redfishDial,
		power.BackendAPI:     metrics.Instrument(power.BackendAPI, api.Dial),
	}

	if opts.RedfishUseAlways || opts.RedfishUseWhenAvailable {
		prefer := &power.RedfishFirst{
			Redfish: redfishDial, IPMI: ipmiDial, Always: opts.RedfishUseAlways,
			Port: opts.RedfishPort, HTTPS: opts.RedfishUseHTTPS, Insecure: opts.RedfishInsecureSkipTLSVerify,
		}
		d[power.BackendIPMI] = prefer.Dial
	}

	return d
}

// newPowerController checks the power flags and returns the controller they configure;
// metrics (nil: none) time its BMC calls.
func newPowerController(opts Options, policy lifecycle.Policy, metrics *power.Metrics) (*controllers.PowerController, error) {
	mode, ok := map[string]power.BootMode{"auto": power.BootModeAuto, "bios": power.BootModeLegacy, "uefi": power.BootModeUEFI}[opts.IPMIPXEBootMode]
	if !ok {
		return nil, fmt.Errorf("unknown --ipmi-pxe-boot-mode %q (want auto, bios or uefi)", opts.IPMIPXEBootMode)
	}

	if opts.RedfishPort < 0 || opts.RedfishPort > 65535 {
		return nil, fmt.Errorf("--redfish-port %d is out of range", opts.RedfishPort)
	}

	if opts.PowerPollInterval <= 0 || opts.PowerTimeout <= 0 || opts.PowerConcurrency <= 0 || opts.MinRebootInterval < 0 {
		return nil, fmt.Errorf("--power-poll-interval, --power-timeout and --power-concurrency must be positive, --min-reboot-interval not negative")
	}

	return &controllers.PowerController{
		Dialers:           powerDialers(opts, metrics),
		Policy:            policy,
		PollInterval:      opts.PowerPollInterval,
		MinActionInterval: opts.MinRebootInterval,
		BootMode:          mode,
		Concurrency:       opts.PowerConcurrency,
		Timeout:           opts.PowerTimeout,
	}, nil
}
