// Package power is the one interface the provider drives every machine's power through,
// whatever its BMC speaks: IPMI (power/ipmi), Redfish (power/redfish), the lab's HTTP
// power API (power/api), or nothing at all (manual power).
package power

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// BootMode is the firmware flavour a PXE-once override asks for.
type BootMode string

// Boot modes. Auto leaves the mode to the BMC (the override without a mode).
const (
	BootModeAuto   BootMode = ""
	BootModeLegacy BootMode = "legacy"
	BootModeUEFI   BootMode = "uefi"
)

// Client controls one machine's power. Every call is bounded by ctx; a BMC that is down,
// slow or refuses the credentials returns an error (wrapping ErrUnreachable or
// ErrUnauthorized where the backend can tell), never blocks past ctx.
type Client interface {
	// PowerState reads whether the machine is powered on.
	PowerState(ctx context.Context) (on bool, err error)
	// PowerOn powers the machine on; on an already running machine it does nothing.
	PowerOn(ctx context.Context) error
	// PowerOff powers the machine off at once (not a graceful shutdown).
	PowerOff(ctx context.Context) error
	// PowerCycle restarts a running machine (reset or off+on, whatever the BMC offers)
	// and powers on one that is off.
	PowerCycle(ctx context.Context) error
	// SetPXEOnce makes the next boot, and only the next, a network boot.
	SetPXEOnce(ctx context.Context, mode BootMode) error
	// Close releases the session, if the backend keeps one.
	Close() error
}

// Backend names how a BMC is spoken to.
type Backend string

// Backends.
const (
	BackendNone    Backend = "none"
	BackendIPMI    Backend = "ipmi"
	BackendRedfish Backend = "redfish"
	BackendAPI     Backend = "api"
)

// Endpoint is where and how to reach one machine's BMC.
type Endpoint struct {
	Backend  Backend
	Address  string // host name or IP (or, for BackendAPI, the base URL)
	Port     int    // 0: the backend's default
	Username string
	Password string
	// Insecure skips TLS verification (Redfish only); off unless the user asks.
	Insecure bool
	// SystemID picks the Redfish System to drive; empty: the one matching MachineUUID,
	// or the only one.
	SystemID string
	// MachineUUID is the SMBIOS UUID of the machine, to pick its Redfish System.
	MachineUUID string
}

// String describes the endpoint without its password.
func (e Endpoint) String() string {
	host := e.Address
	if e.Port != 0 {
		host += ":" + strconv.Itoa(e.Port)
	}

	if e.Username != "" {
		host = e.Username + "@" + host
	}

	return string(e.Backend) + "://" + host
}

// Errors a backend wraps so that callers can tell what went wrong without parsing text.
var (
	// ErrUnreachable: no answer (timeout, connection refused, no route).
	ErrUnreachable = errors.New("BMC unreachable")
	// ErrUnauthorized: the BMC answered and refused the credentials.
	ErrUnauthorized = errors.New("BMC refused the credentials")
	// ErrUnsupported: the BMC does not offer the operation.
	ErrUnsupported = errors.New("operation not supported by the BMC")
	// ErrManual: the machine has no BMC the provider can drive.
	ErrManual = errors.New("no BMC: power is manual")
)

// Dialer opens a Client for an endpoint of one kind.
type Dialer func(ctx context.Context, ep Endpoint) (Client, error)

// Dialers maps each backend kind to its dialer; the wiring fills it, so that this package
// does not import its backends.
type Dialers map[Backend]Dialer

// Dial opens a client for ep with the dialer of its kind.
func (d Dialers) Dial(ctx context.Context, ep Endpoint) (Client, error) {
	if ep.Backend == BackendNone || ep.Backend == "" {
		return nil, ErrManual
	}

	dial, ok := d[ep.Backend]
	if !ok {
		return nil, fmt.Errorf("no power backend %q", ep.Backend)
	}

	c, err := dial(ctx, ep)
	if err != nil {
		return nil, fmt.Errorf("error connecting to %s: %w", ep, err)
	}

	return c, nil
}
