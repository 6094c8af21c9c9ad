// Package config reads the agent's configuration: the kernel command line the provider's
// iPXE script set, overridden by flags when the agent runs outside an initramfs.
package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/siderolabs/go-procfs/procfs"

	"github.com/anvil-metal/anvil/internal/bootparams"
)

// Config is what the agent needs to reach the provider.
type Config struct {
	// Provider is the provider's API endpoint, host:port.
	Provider string
	// CAFingerprint is the SHA-256 (hex) of the provider's CA certificate.
	CAFingerprint string
	// MachineID is the machine's ID as the provider named it.
	MachineID string
	// Token is the per-boot token. It is never logged.
	Token string

	// Omni's join parameters, as the kernel cmdline has them; Omni parses and checks them
	// (see omni.go). All empty when the machine joins no Omni. SideroLinkAPI carries the
	// join token: it is never logged.
	SideroLinkAPI string
	EventsSink    string
	KernelLog     string
}

// FromCmdline reads the configuration from a kernel command line.
func FromCmdline(cmdline string) Config {
	c := procfs.NewCmdline(cmdline)

	get := func(key string) string {
		if v := c.Get(key).First(); v != nil {
			return *v
		}

		return ""
	}

	return Config{
		Provider:      get(bootparams.Provider),
		CAFingerprint: get(bootparams.CA),
		MachineID:     get(bootparams.MachineID),
		Token:         get(bootparams.Token),
		SideroLinkAPI: get(bootparams.SideroLinkAPI),
		EventsSink:    get(bootparams.EventsSink),
		KernelLog:     get(bootparams.LoggingKernel),
	}
}

// Merge returns c with the non-empty fields of override.
func (c Config) Merge(override Config) Config {
	for _, f := range []struct{ dst, src *string }{
		{&c.Provider, &override.Provider},
		{&c.CAFingerprint, &override.CAFingerprint},
		{&c.MachineID, &override.MachineID},
		{&c.Token, &override.Token},
		{&c.SideroLinkAPI, &override.SideroLinkAPI},
		{&c.EventsSink, &override.EventsSink},
		{&c.KernelLog, &override.KernelLog},
	} {
		if *f.src != "" {
			*f.dst = *f.src
		}
	}

	return c
}

// Validate says what is missing or malformed, naming the kernel parameter. It checks the
// provider's parameters only: Omni's are checked by Omni, so that a malformed one costs the
// machine its Omni join, not its provider.
func (c Config) Validate() error {
	var errs []error

	if _, _, err := net.SplitHostPort(c.Provider); err != nil {
		errs = append(errs, fmt.Errorf("%s=%q is not host:port", bootparams.Provider, c.Provider))
	}

	if b, err := hex.DecodeString(strings.ReplaceAll(c.CAFingerprint, ":", "")); err != nil || len(b) != 32 {
		errs = append(errs, fmt.Errorf("%s is not a SHA-256 fingerprint", bootparams.CA))
	}

	if c.MachineID == "" {
		errs = append(errs, fmt.Errorf("%s is missing", bootparams.MachineID))
	}

	if c.Token == "" {
		errs = append(errs, fmt.Errorf("%s is missing", bootparams.Token))
	}

	return errors.Join(errs...)
}
