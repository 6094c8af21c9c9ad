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

		return nil, classify(ctx, "reading the Redfish service root", err)
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

		return nil, classify(ctx, "connecting to the Redfish service", err)
	}

	if c.system, err = c.pickSystem(ctx, ep); err != nil {
		c.Close()

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
		return "", classify(ctx, "listing the Redfish systems", err)
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

	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10)) // for the message only

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
