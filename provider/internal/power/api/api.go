// Package api is the power backend for machines whose power is behind a plain HTTP API
// (internal/powerwire), as the lab's QEMU machines are (hack/internal/powerapi).
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/internal/powerwire"
	"github.com/anvil-metal/anvil/provider/internal/power"
)

// maxReply bounds what is read of a reply: a power API answers in bytes.
const maxReply = 64 << 10

type client struct {
	base *url.URL
	ep   power.Endpoint
	http *http.Client
}

// Dial returns a client for the machine ep.MachineUUID behind the API at ep.Address.
// Nothing is sent until the first call.
func Dial(_ context.Context, ep power.Endpoint) (power.Client, error) {
	u, err := url.Parse(ep.Address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("power API address %q is not an http(s) URL", ep.Address)
	}

	if ep.MachineUUID == "" {
		return nil, errors.New("power API: the machine's UUID is required")
	}

	return &client{base: u, ep: ep, http: &http.Client{Timeout: 30 * time.Second}}, nil
}

func (c *client) PowerState(ctx context.Context) (bool, error) {
	var reply powerwire.PowerReply
	if err := c.do(ctx, http.MethodGet, "power", nil, &reply); err != nil {
		return false, err
	}

	switch reply.State {
	case "on":
		return true, nil
	case "off":
		return false, nil
	default:
		return false, fmt.Errorf("power API answered an unknown power state %q", reply.State)
	}
}

func (c *client) PowerOn(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "power", powerwire.PowerRequest{Action: powerwire.ActionOn}, nil)
}

func (c *client) PowerOff(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "power", powerwire.PowerRequest{Action: powerwire.ActionOff}, nil)
}

func (c *client) PowerCycle(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "power", powerwire.PowerRequest{Action: powerwire.ActionCycle}, nil)
}

func (c *client) SetPXEOnce(ctx context.Context, mode power.BootMode) error {
	return c.do(ctx, http.MethodPost, "boot", powerwire.BootRequest{Device: "network", Once: true, Mode: string(mode)}, nil)
}

func (c *client) Close() error {
	c.http.CloseIdleConnections()

	return nil
}

func (c *client) do(ctx context.Context, method, what string, body, reply any) error {
	u := c.base.JoinPath("machines", c.ep.MachineUUID, what)

	var rd io.Reader

	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("error encoding the %s request: %w", what, err)
		}

		rd = bytes.NewReader(b)
	}

	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return fmt.Errorf("error building the %s request: %w", what, err)
	}

	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}

	if c.ep.Username != "" {
		req.SetBasicAuth(c.ep.Username, c.ep.Password)
	}

	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w: %w", method, redactURL(u), power.ErrUnreachable, unwrapURLError(err))
	}
	defer resp.Body.Close()

	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return fmt.Errorf("%s %s: error reading the reply: %w", method, redactURL(u), err)
	}

	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s %s: %w (HTTP %d)", method, redactURL(u), power.ErrUnauthorized, resp.StatusCode)
	case resp.StatusCode >= 300:
		var e powerwire.ErrorReply

		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}

		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}

		return fmt.Errorf("%s %s: HTTP %d: %s", method, redactURL(u), resp.StatusCode, msg)
	}

	if reply == nil {
		return nil
	}

	if err := json.Unmarshal(data, reply); err != nil {
		return fmt.Errorf("%s %s: the reply is not the expected JSON: %w", method, redactURL(u), err)
	}

	return nil
}

// redactURL drops any user info from a URL for messages.
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil

	return c.String()
}

// unwrapURLError keeps the cause of a *url.Error (whose text repeats the URL).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		var ne net.Error
		if errors.As(ue.Err, &ne) && ne.Timeout() {
			return fmt.Errorf("timeout: %w", ue.Err)
		}

		return ue.Err
	}

	return err
}
