// Package ipmi drives a machine's power through its BMC over IPMI v2.0 RMCP+ (lanplus),
// with go-ipmi's client.
package ipmi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goipmi "github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/anvil-metal/anvil/provider/internal/power"
)

// DefaultPort is the RMCP port BMCs listen on.
const DefaultPort = 623

const (
	// cipherSuite 3 (RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128) is the suite IPMI 2.0
	// requires of every BMC and the one ipmi_sim serves; naming it spares the probe of
	// every suite, which costs seconds on BMCs that ignore the ones they lack.
	cipherSuite = types.CipherSuiteID3
	// attemptTimeout bounds one UDP exchange; the caller's ctx bounds the whole call.
	attemptTimeout = time.Second
	// retries after a timed-out exchange (UDP loses packets; a BMC under load drops some).
	retries = 2
	// closeTimeout bounds Close, which takes no ctx.
	closeTimeout = 2 * time.Second
)

var errClosed = errors.New("IPMI session closed")

// Dial opens an RMCP+ session with the BMC at ep. The session asks for the Operator
// privilege, the least that chassis control and boot options need, so a BMC user
// limited to Operator works as well as an Administrator.
func Dial(ctx context.Context, ep power.Endpoint) (power.Client, error) {
	if ep.Address == "" {
		return nil, errors.New("no BMC address")
	}

	port := ep.Port
	if port == 0 {
		port = DefaultPort
	}

	lib, err := goipmi.NewClient(ep.Address, port, ep.Username, ep.Password)
	if err != nil {
		return nil, fmt.Errorf("error setting up the IPMI client: %w", err)
	}

	lib.WithCipherSuiteID(cipherSuite).
		WithTimeout(attemptTimeout).
		WithRetry(retries).
		WithMaxPrivilegeLevel(types.PrivilegeLevelOperator)

	c := &client{lib: lib, desc: ep.String(), turn: make(chan struct{}, 1)}

	if err = c.call(ctx, "opening a session", lib.Connect); err != nil {
		// The socket (and any half-open session) goes once the connect attempt returns.
		go c.release(expiredContext()) //nolint:errcheck // nothing to report to: the dial failed already

		return nil, err
	}

	return c, nil
}

// client is one RMCP+ session. IPMI requests on a session are sequenced, so calls take
// turns; a call abandoned at ctx.Done keeps its turn until the library returns, which its
// own per-exchange timeout bounds, so the next call never overlaps it.
type client struct {
	lib  *goipmi.Client
	desc string // the endpoint without its password, for errors
	turn chan struct{}

	// silent records that a call got no answer: Close then skips Close Session, which
	// would only wait for the same silence.
	silent atomic.Bool
	// closed refuses calls after Close: go-ipmi would open a new socket for them.
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// call runs fn (a go-ipmi call) and returns at ctx.Done at the latest, whatever the
// library does; the goroutine running fn ends when the library returns.
func (c *client) call(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	if c.closed.Load() {
		return fmt.Errorf("error %s: %w", what, errClosed)
	}

	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return wrapError(what, ctx.Err())
	}

	done := make(chan error, 1)

	go func() {
		defer func() { <-c.turn }()

		done <- fn(ctx)
	}()

	var err error

	select {
	case err = <-done:
	case <-ctx.Done():
		// An answer that arrived together with the deadline still counts.
		select {
		case err = <-done:
		default:
			err = ctx.Err()
		}
	}

	err = wrapError(what, err)
	if errors.Is(err, power.ErrUnreachable) {
		c.silent.Store(true)
	}

	return err
}

// PowerState reads the chassis power state.
func (c *client) PowerState(ctx context.Context) (bool, error) {
	on, err := c.isOn(ctx)
	if err != nil {
		return false, fmt.Errorf("%s: %w", c.desc, err)
	}

	return on, nil
}

func (c *client) isOn(ctx context.Context) (bool, error) {
	var on bool

	err := c.call(ctx, "reading the chassis status", func(ctx context.Context) error {
		res, err := c.lib.GetChassisStatus(ctx)
		if err != nil {
			return err // call wraps
		}

		on = res.PowerIsOn

		return nil
	})

	return on, err
}

func (c *client) control(ctx context.Context, what string, action chassis.ChassisControl) error {
	return c.call(ctx, what, func(ctx context.Context) error {
		_, err := c.lib.ChassisControl(ctx, action)

		return err // call wraps
	})
}

// PowerOn powers the machine up unless it is on already (some BMCs refuse a power-up
// of a running machine).
func (c *client) PowerOn(ctx context.Context) error {
	on, err := c.isOn(ctx)
	if err == nil && !on {
		err = c.control(ctx, "powering on", chassis.ChassisControlPowerUp)
	}

	if err != nil {
		return fmt.Errorf("%s: %w", c.desc, err)
	}

	return nil
}

// PowerOff powers the machine down at once. A BMC that refuses because the machine is
// off already has done what was asked.
func (c *client) PowerOff(ctx context.Context) error {
	err := c.control(ctx, "powering off", chassis.ChassisControlPowerDown)
	if isRefusal(err) {
		if on, stateErr := c.isOn(ctx); stateErr == nil && !on {
			return nil
		}
	}

	if err != nil {
		return fmt.Errorf("%s: %w", c.desc, err)
	}

	return nil
}

// PowerCycle powers an off machine on, and power-cycles a running one; a BMC that
// refuses the power cycle gets a hard reset instead.
func (c *client) PowerCycle(ctx context.Context) error {
	on, err := c.isOn(ctx)

	switch {
	case err != nil:
	case !on:
		err = c.control(ctx, "powering on", chassis.ChassisControlPowerUp)
	default:
		err = c.control(ctx, "power-cycling", chassis.ChassisControlPowerCycle)
		if isRefusal(err) {
			err = c.control(ctx, "resetting (the BMC refused a power cycle)", chassis.ChassisControlHardReset)
		}
	}

	if err != nil {
		return fmt.Errorf("%s: %w", c.desc, err)
	}

	return nil
}

// SetPXEOnce sets the boot flags (Set System Boot Options, parameter 5): valid, next
// boot only, force PXE, and the firmware type of mode. BootModeAuto keeps the type bit
// the BMC holds (0, PC-compatible, on a BMC nobody has set), as ipmitool's
// "bootdev pxe" without options does not choose either. The BMC clears the valid bit
// by itself if no restart follows within 60 s (IPMI 2.0 §28.12), so callers set it
// right before the power action.
func (c *client) SetPXEOnce(ctx context.Context, mode power.BootMode) error {
	flags := &types.BootOptionParam_BootFlags{
		BootFlagsValid:     true,
		Persist:            false,
		BootDeviceSelector: types.BootDeviceSelectorForcePXE,
	}

	switch mode {
	case power.BootModeUEFI:
		flags.BIOSBootType = types.BIOSBootTypeEFI
	case power.BootModeLegacy:
		flags.BIOSBootType = types.BIOSBootTypeLegacy
	case power.BootModeAuto:
		current, err := c.bootFlags(ctx)

		switch {
		case err == nil:
			flags.BIOSBootType = current.BIOSBootType
		case !isRefusal(err):
			return fmt.Errorf("%s: %w", c.desc, err)
		}
	default:
		return fmt.Errorf("unknown boot mode %q", mode)
	}

	err := c.call(ctx, "setting the boot flags", func(ctx context.Context) error {
		return c.lib.SetSystemBootOptionsParamFor(ctx, flags) // call wraps
	})
	if err != nil {
		if isRefusal(err) && !isUnauthorized(err) {
			// The BMC answered and refused the parameter (some BMCs, ipmi_sim without a
			// chassis program among them, do not take boot options over the LAN): a
			// power action can still go ahead, the machine boots its own order.
			return fmt.Errorf("%s: %w: %w", c.desc, power.ErrUnsupported, err)
		}

		return fmt.Errorf("%s: %w", c.desc, err)
	}

	return nil
}

// bootFlags reads the boot flags parameter.
func (c *client) bootFlags(ctx context.Context) (*types.BootOptionParam_BootFlags, error) {
	flags := &types.BootOptionParam_BootFlags{}

	err := c.call(ctx, "reading the boot flags", func(ctx context.Context) error {
		return c.lib.GetSystemBootOptionsParamFor(ctx, flags) // call wraps
	})
	if err != nil {
		return nil, err
	}

	return flags, nil
}

// Close ends the session (unless the BMC stopped answering). However long the BMC takes, it returns within closeTimeout;
// the socket and go-ipmi's keep-alive goroutine go in any case, at the latest once a
// call still on the wire returns.
func (c *client) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)

		if c.silent.Load() {
			// Nothing to say to a BMC that stopped answering: free the socket and the
			// keep-alive goroutine once the call still on the wire returns (go-ipmi's
			// per-exchange timeout bounds that), without making the caller wait.
			go c.release(expiredContext()) //nolint:errcheck // nothing to report

			return
		}

		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()

		done := make(chan error, 1)

		go func() { done <- c.release(ctx) }()

		var err error

		select {
		case err = <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}

		if err != nil {
			c.closeErr = fmt.Errorf("%s: %w", c.desc, wrapError("closing the session", err))
		}
	})

	return c.closeErr
}

// release waits for its turn, then closes the library client: with a live ctx it ends
// the session with Close Session first, with a done one it only frees local resources.
func (c *client) release(ctx context.Context) error {
	c.turn <- struct{}{}
	defer func() { <-c.turn }()

	return c.lib.Close(ctx) // the callers wrap
}

// expiredContext makes release free local resources only.
func expiredContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	return ctx
}
