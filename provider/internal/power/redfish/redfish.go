// Package redfish drives a machine's power and boot override through its BMC's Redfish
// service (with gofish). BMCs differ in what they offer, so every operation reads what
// the system document allows and falls back: session or basic authentication,
// ForceRestart or PowerCycle or off-and-on, a boot mode only where the BMC has one.
package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/anvil-metal/anvil/provider/internal/power"
)

// Timeouts that hold when the caller's context has no deadline: a BMC that accepts a
// connection and never answers must not hang the provider.
const (
	dialTimeout    = 10 * time.Second
	requestTimeout = 2 * time.Minute
	logoutTimeout  = 5 * time.Second
	offPoll        = 500 * time.Millisecond
	offWait        = time.Minute
)

// Dial connects to ep's Redfish service, authenticates (a session where the BMC has a
// SessionService, else basic authentication) and picks ep's system.
func Dial(ctx context.Context, ep power.Endpoint) (power.Client, error) {
	c, err := dial(ctx, ep, nil)
	if err != nil {
		return nil, err // not a nil *client in a non-nil interface
	}

	return c, nil
}

var _ power.Client = (*client)(nil)

// client is one machine's system on one BMC.
type client struct {
	api     *gofish.APIClient
	http    *http.Client
	session bool
	// system is the @odata.id of the machine's ComputerSystem.
	system string
	name   string // the endpoint, for messages (without its password)

	closeOnce sync.Once
}

// dial is Dial with the roots that verify the BMC's certificate (nil: the system's).
func dial(ctx context.Context, ep power.Endpoint, roots *x509.CertPool) (*client, error) {
	base, err := baseURL(ep)
	if err != nil {
		return nil, err
	}

	hc := &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			// No proxy from the environment: BMCs sit on a management network that a
			// proxy for the outside world would not reach.
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   dialTimeout,
			ResponseHeaderTimeout: requestTimeout,
			IdleConnTimeout:       30 * time.Second,
			TLSClientConfig: &tls.Config{
				RootCAs:            roots,
				InsecureSkipVerify: ep.Insecure, //nolint:gosec // only when the user asks
				MinVersion:         tls.VersionTLS12,
			},
		},
	}

	c := &client{http: hc, name: ep.String()}

	cfg := gofish.ClientConfig{
		Endpoint:          base,
		Username:          ep.Username,
		Password:          ep.Password,
		HTTPClient:        hc,
		NoModifyTransport: true,
		ReuseConnections:  true,
	}

	sessions, err := hasSessions(ctx, hc, base)
	if err != nil {
		hc.CloseIdleConnections()

		return nil, classify("reading the Redfish service root", err)
	}

	// A session where the BMC has them: one login instead of the password in every
	// request, and some BMCs refuse basic authentication. Basic where it has none, or
	// where its SessionService fails for another reason than the credentials.
	cfg.BasicAuth = !sessions
	c.api, err = gofish.ConnectContext(ctx, cfg)
	c.session = err == nil && sessions && ep.Username != ""

	if err != nil && sessions && noSessions(err) {
		cfg.BasicAuth = true
		c.api, err = gofish.ConnectContext(ctx, cfg)
	}

	if err != nil {
		hc.CloseIdleConnections()

		return nil, classify("connecting to the Redfish service", err)
	}

	if c.system, err = c.pickSystem(ctx, ep); err != nil {
		c.Close() //nolint:errcheck

		return nil, err
	}

	return c, nil
}

// baseURL is https://address[:port], or the address's own scheme if it has one.
func baseURL(ep power.Endpoint) (string, error) {
	addr := strings.TrimSpace(ep.Address)
	if addr == "" {
		return "", errors.New("the Redfish endpoint has no address")
	}

	scheme := "https"

	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "", fmt.Errorf("the Redfish address %q is not an http(s) URL", addr)
		}

		scheme, addr = u.Scheme, u.Host
	}

	if ep.Port != 0 {
		host := addr
		if h, _, err := net.SplitHostPort(addr); err == nil {
			host = h
		}

		addr = net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(ep.Port))
	} else if ip := net.ParseIP(addr); ip != nil && ip.To4() == nil {
		addr = "[" + addr + "]"
	}

	return scheme + "://" + addr, nil
}

// pickSystem finds the machine's ComputerSystem: by id, by UUID, or the only one.
func (c *client) pickSystem(ctx context.Context, ep power.Endpoint) (string, error) {
	systems, err := c.api.WithContext(ctx).Service.Systems()
	if err != nil {
		return "", classify("listing the Redfish systems", err)
	}

	var found []string

	for _, sys := range systems {
		switch {
		case ep.SystemID != "" && (sys.ID == ep.SystemID || sys.ODataID == ep.SystemID):
			return sys.ODataID, nil
		case ep.SystemID == "" && ep.MachineUUID != "" && strings.EqualFold(sys.UUID, ep.MachineUUID):
			return sys.ODataID, nil
		}

		found = append(found, fmt.Sprintf("%s (UUID %s)", sys.ID, sys.UUID))
	}

	switch {
	case ep.SystemID != "":
		return "", fmt.Errorf("no Redfish system %q on %s; found: %s", ep.SystemID, c.name, strings.Join(found, ", "))
	case len(systems) == 1:
		return systems[0].ODataID, nil
	case len(systems) == 0:
		return "", fmt.Errorf("no Redfish systems on %s", c.name)
	case ep.MachineUUID != "":
		return "", fmt.Errorf("no Redfish system with UUID %s on %s; found: %s", ep.MachineUUID, c.name, strings.Join(found, ", "))
	default:
		return "", fmt.Errorf("%d Redfish systems on %s and neither a system id nor the machine's UUID to choose; found: %s",
			len(systems), c.name, strings.Join(found, ", "))
	}
}

// Close logs out of the session, if there is one.
func (c *client) Close() error {
	c.closeOnce.Do(func() {
		if c.session {
			ctx, cancel := context.WithTimeout(context.Background(), logoutTimeout)
			defer cancel()

			c.api.WithContext(ctx).Logout()
		}

		c.http.CloseIdleConnections()
	})

	return nil
}

// hasSessions reads the service root (open to all, as the Redfish specification asks)
// for a link to the sessions.
func hasSessions(ctx context.Context, hc *http.Client, base string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/redfish/v1/", nil)
	if err != nil {
		return false, fmt.Errorf("error making the request: %w", err)
	}

	req.Header.Set("Accept", "application/json")

	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}

	defer resp.Body.Close() //nolint:errcheck

	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10)) //nolint:errcheck // for the message only

		return false, schemas.ConstructError(resp.StatusCode, b)
	}

	var root struct {
		Links struct {
			Sessions struct {
				ID string `json:"@odata.id"`
			}
		}
	}

	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&root); err != nil {
		return false, fmt.Errorf("the service root is not a Redfish document: %w", err)
	}

	return root.Links.Sessions.ID != "", nil
}

// noSessions tells a BMC without a usable SessionService (no link, 404, 405, 501…)
// from one that refused the credentials.
func noSessions(err error) bool {
	var re *schemas.Error
	if !errors.As(err, &re) {
		return false
	}

	code := re.HTTPReturnedStatusCode

	return code != http.StatusUnauthorized && code != http.StatusForbidden
}

// statusOf is the HTTP status of a Redfish error (also inside a collection's errors), 0 if none.
func statusOf(err error) int {
	var re *schemas.Error
	if errors.As(err, &re) {
		return re.HTTPReturnedStatusCode
	}

	var ce *schemas.CollectionError
	if errors.As(err, &ce) {
		for _, e := range ce.Failures {
			if code := statusOf(e); code != 0 {
				return code
			}
		}
	}

	return 0
}

// unreachable tells a BMC that did not answer (refused, timed out, cut off).
func unreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}

	var ce *schemas.CollectionError
	if errors.As(err, &ce) {
		for _, e := range ce.Failures {
			if unreachable(e) {
				return true
			}
		}

		return false
	}

	var (
		opErr  *net.OpError
		netErr net.Error
	)

	return errors.As(err, &opErr) || (errors.As(err, &netErr) && netErr.Timeout())
}

// classify wraps err with what was being done and the power error it amounts to.
func classify(doing string, err error) error {
	var verr *tls.CertificateVerificationError

	switch code := statusOf(err); {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return fmt.Errorf("error %s: %w: %w", doing, power.ErrUnauthorized, err)
	case errors.As(err, &verr):
		return fmt.Errorf("error %s: the BMC's certificate is not trusted (the endpoint's Insecure skips the check): %w", doing, err)
	case unreachable(err):
		return fmt.Errorf("error %s: %w: %w", doing, power.ErrUnreachable, err)
	default:
		return fmt.Errorf("error %s: %w", doing, err)
	}
}

// resetAction is the system's Reset action as its document describes it.
type resetAction struct {
	target string
	// allowed are the listed reset types; nil when the BMC lists none.
	allowed []schemas.ResetType
}

func (c *client) load(ctx context.Context) (*schemas.ComputerSystem, resetAction, error) {
	sys, err := schemas.GetObject[schemas.ComputerSystem](c.api.WithContext(ctx), c.system)
	if err != nil {
		return nil, resetAction{}, classify("reading the Redfish system "+c.system, err)
	}

	var doc struct {
		Actions struct {
			Reset struct {
				Target  string              `json:"target"`
				Allowed []schemas.ResetType `json:"ResetType@Redfish.AllowableValues"`
			} `json:"#ComputerSystem.Reset"`
		}
	}

	// The document decoded once already; the action's target is not exported by gofish.
	if err := json.Unmarshal(sys.RawData, &doc); err != nil {
		return nil, resetAction{}, fmt.Errorf("error reading the Reset action of %s: %w", c.system, err)
	}

	return sys, resetAction{target: doc.Actions.Reset.Target, allowed: doc.Actions.Reset.Allowed}, nil
}

func stateOf(sys *schemas.ComputerSystem) (power.State, error) {
	switch sys.PowerState {
	case schemas.OnPowerState, schemas.PoweringOnPowerState:
		return power.StateOn, nil
	case schemas.OffPowerState, schemas.PoweringOffPowerState:
		return power.StateOff, nil
	default:
		return power.StateUnknown, fmt.Errorf("the Redfish system %s reports the power state %q", sys.ODataID, sys.PowerState)
	}
}

// PowerState reads the system's power state.
func (c *client) PowerState(ctx context.Context) (power.State, error) {
	sys, _, err := c.load(ctx)
	if err != nil {
		return power.StateUnknown, err
	}

	return stateOf(sys)
}

// PowerOn powers an off machine on.
func (c *client) PowerOn(ctx context.Context) error {
	sys, action, err := c.load(ctx)
	if err != nil {
		return err
	}

	if st, err := stateOf(sys); err == nil && st == power.StateOn {
		return nil
	}

	return c.reset(sys, action, schemas.OnResetType, schemas.ForceOnResetType, schemas.PushPowerButtonResetType)
}

// PowerOff cuts a running machine's power.
func (c *client) PowerOff(ctx context.Context) error {
	sys, action, err := c.load(ctx)
	if err != nil {
		return err
	}

	if st, err := stateOf(sys); err == nil && st == power.StateOff {
		return nil
	}

	return c.reset(sys, action, schemas.ForceOffResetType)
}

// PowerCycle restarts a running machine with whatever the BMC offers: ForceRestart,
// else PowerCycle, else ForceOff and On. A machine that is off is powered on.
func (c *client) PowerCycle(ctx context.Context) error {
	sys, action, err := c.load(ctx)
	if err != nil {
		return err
	}

	if st, err := stateOf(sys); err == nil && st == power.StateOff {
		return c.reset(sys, action, schemas.OnResetType, schemas.ForceOnResetType, schemas.PushPowerButtonResetType)
	}

	err = c.reset(sys, action, schemas.ForceRestartResetType, schemas.PowerCycleResetType)
	if !errors.Is(err, power.ErrUnsupported) {
		return err
	}

	if err := c.reset(sys, action, schemas.ForceOffResetType); err != nil {
		return err
	}

	// The BMC may take a moment to report the machine off, and refuse On until it does.
	if err := c.waitOff(ctx); err != nil {
		return err
	}

	return c.reset(sys, action, schemas.OnResetType, schemas.ForceOnResetType)
}

func (c *client) waitOff(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, offWait)
	defer cancel()

	for {
		st, err := c.PowerState(ctx)
		if err != nil {
			return err
		}

		if st == power.StateOff {
			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("error waiting for %s to power off: %w: %w", c.system, power.ErrUnreachable, ctx.Err())
		case <-time.After(offPoll):
		}
	}
}

// reset runs the first of the reset types the system offers. A BMC that lists no
// types is tried type by type, taking a refusal (400, 405, 501) as "not this one".
func (c *client) reset(sys *schemas.ComputerSystem, action resetAction, types ...schemas.ResetType) error {
	if action.target == "" {
		return fmt.Errorf("%w: the Redfish system %s has no Reset action", power.ErrUnsupported, sys.ODataID)
	}

	for _, rt := range types {
		if action.allowed != nil && !slices.Contains(action.allowed, rt) {
			continue
		}

		_, err := sys.Reset(rt)
		if err == nil {
			return nil
		}

		switch statusOf(err) {
		case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusNotImplemented:
			if action.allowed == nil {
				continue
			}
		}

		return classify(fmt.Sprintf("resetting %s (%s)", sys.ODataID, rt), err)
	}

	return fmt.Errorf("%w: the Redfish system %s offers none of the reset types %v (it offers %v)",
		power.ErrUnsupported, sys.ODataID, types, action.allowed)
}

// SetPXEOnce makes the next boot a network boot, in the given mode where the BMC has
// boot modes.
func (c *client) SetPXEOnce(ctx context.Context, mode power.BootMode) error {
	modes := map[power.BootMode]schemas.BootSourceOverrideMode{
		power.BootModeAuto:   "",
		power.BootModeLegacy: schemas.LegacyBootSourceOverrideMode,
		power.BootModeUEFI:   schemas.UEFIBootSourceOverrideMode,
	}

	want, ok := modes[mode]
	if !ok {
		return fmt.Errorf("unknown boot mode %q (legacy, uefi or empty for the BMC's choice)", mode)
	}

	sys, _, err := c.load(ctx)
	if err != nil {
		return err
	}

	if targets := sys.Boot.AllowableBootSourceOverrideTargetValues; len(targets) > 0 && !slices.Contains(targets, schemas.PxeBootSource) {
		return fmt.Errorf("%w: the Redfish system %s offers no Pxe boot override (it offers %v)", power.ErrUnsupported, sys.ODataID, targets)
	}

	boot := &schemas.Boot{
		BootSourceOverrideTarget:  schemas.PxeBootSource,
		BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled,
	}

	// A BMC whose Boot has no BootSourceOverrideMode does not take one: the firmware
	// boots the way it is set up.
	if sys.Boot.BootSourceOverrideMode != "" {
		boot.BootSourceOverrideMode = want
	}

	if err := sys.SetBoot(boot); err != nil {
		return classify("setting the PXE boot override of "+sys.ODataID, err)
	}

	return nil
}
