package redfish

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/power"
)

const (
	uuidA = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
	uuidB = "6f1c5c2e-8d0a-4c57-9a37-2f6d7b0e1a01"
	uuidC = "0e9f5c4a-4b43-4f0b-8d2d-5a1e6f3b2c10"
)

func testContext(t *testing.T) context.Context {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)

	return ctx
}

func endpoint(s *service) power.Endpoint {
	return power.Endpoint{Backend: power.BackendRedfish, Address: s.host(), Username: testUser, Password: testPassword, Insecure: true}
}

// TestVariations drives the provisioning sequence (PXE once, power cycle, power cycle)
// against each vendor shape and checks what the machine did: which power calls it got
// and what each boot was.
func TestVariations(t *testing.T) {
	t.Parallel()

	restart := []string{"Reset", "boot:network", "Reset", "boot:disk"}
	cycle := []string{"ForceOff", "PowerOn", "boot:network", "ForceOff", "PowerOn", "boot:disk"}

	for _, tc := range []struct {
		name      string
		args      []string
		ep        func(*service, *power.Endpoint)
		mode      power.BootMode
		target    string // the machine driven
		wantCalls []string
		wantMode  string // BootSourceOverrideMode after SetPXEOnce; "" when the BMC has none
	}{
		{name: "defaults, by the only system", args: []string{"-fake", uuidA + ":on"}, mode: power.BootModeLegacy, target: uuidA, wantCalls: restart, wantMode: "Legacy"},
		{name: "no ForceRestart", args: []string{"-fake", uuidA + ":on", "-reset-types", "On,ForceOff,PowerCycle"}, mode: power.BootModeUEFI, target: uuidA, wantCalls: cycle, wantMode: "UEFI"},
		{name: "no PowerCycle", args: []string{"-fake", uuidA + ":on", "-reset-types", "On,ForceOff,ForceRestart,GracefulShutdown"}, target: uuidA, wantCalls: restart, wantMode: "UEFI"},
		{name: "only On and ForceOff", args: []string{"-fake", uuidA + ":on", "-reset-types", "On,ForceOff"}, target: uuidA, wantCalls: cycle, wantMode: "UEFI"},
		{name: "reset types not listed, no ForceRestart", args: []string{"-fake", uuidA + ":on", "-reset-types", "On,ForceOff,PowerCycle", "-no-reset-allowable-values"}, target: uuidA, wantCalls: cycle, wantMode: "UEFI"},
		{name: "session only", args: []string{"-fake", uuidA + ":on", "-session-only"}, target: uuidA, wantCalls: restart, wantMode: "UEFI"},
		{name: "no sessions: basic", args: []string{"-fake", uuidA + ":on", "-no-sessions"}, target: uuidA, wantCalls: restart, wantMode: "UEFI"},
		{name: "no boot mode", args: []string{"-fake", uuidA + ":on", "-no-boot-mode"}, mode: power.BootModeUEFI, target: uuidA, wantCalls: restart},
		{
			name: "blade chassis, by UUID", args: []string{"-fake", "1=" + uuidA + ":on,2=" + uuidB + ":on,3=" + uuidC + ":on"},
			ep: func(_ *service, ep *power.Endpoint) { ep.MachineUUID = strings.ToUpper(uuidB) }, target: uuidB, wantCalls: restart, wantMode: "UEFI",
		},
		{
			name: "Dell ids, by system id", args: []string{"-fake", "System.Embedded.1=" + uuidA + ":on,System.Embedded.2=" + uuidB + ":on"},
			ep: func(_ *service, ep *power.Endpoint) { ep.SystemID = "System.Embedded.2"; ep.MachineUUID = uuidA }, target: uuidB, wantCalls: restart, wantMode: "UEFI",
		},
		{
			name: "plain HTTP", args: []string{"-fake", uuidA + ":on", "-http-listen", "127.0.0.1:0"},
			ep: func(s *service, ep *power.Endpoint) { ep.Address, ep.Insecure = s.HTTPURL, false }, target: uuidA, wantCalls: restart, wantMode: "UEFI",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ctx := testContext(t)
			s := startService(t, tc.args...)

			ep := endpoint(s)
			if tc.ep != nil {
				tc.ep(s, &ep)
			}

			c, err := Dial(ctx, ep)
			require.NoError(t, err)

			st, err := c.PowerState(ctx)
			require.NoError(t, err)
			assert.True(t, st)

			require.NoError(t, c.SetPXEOnce(ctx, tc.mode))

			var doc struct {
				Boot struct{ BootSourceOverrideEnabled, BootSourceOverrideTarget, BootSourceOverrideMode string }
			}
			s.get(t, c.(*client).system, &doc)
			assert.Equal(t, "Once", doc.Boot.BootSourceOverrideEnabled)
			assert.Equal(t, "Pxe", doc.Boot.BootSourceOverrideTarget)
			assert.Equal(t, tc.wantMode, doc.Boot.BootSourceOverrideMode)

			require.NoError(t, c.PowerCycle(ctx))
			require.NoError(t, c.PowerCycle(ctx))
			assert.Equal(t, tc.wantCalls, s.calls(t, tc.target))

			for _, other := range []string{uuidA, uuidB, uuidC} {
				if other != tc.target && strings.Contains(strings.Join(tc.args, " "), other) {
					assert.Empty(t, s.calls(t, other), "only the machine's own system is driven")
				}
			}

			require.NoError(t, c.Close())
			require.NoError(t, c.Close(), "closing twice is harmless")
		})
	}
}

func TestPowerOnOff(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	s := startService(t, "-fake", uuidA)

	c, err := Dial(ctx, endpoint(s))
	require.NoError(t, err)

	defer c.Close()

	st, err := c.PowerState(ctx)
	require.NoError(t, err)
	assert.False(t, st)

	require.NoError(t, c.PowerOff(ctx), "off already: nothing to do")
	require.NoError(t, c.PowerOn(ctx))
	require.NoError(t, c.PowerOn(ctx), "on already: nothing to do")

	st, err = c.PowerState(ctx)
	require.NoError(t, err)
	assert.True(t, st)

	require.NoError(t, c.PowerOff(ctx))
	require.NoError(t, c.PowerCycle(ctx), "a cycle powers an off machine on")
	assert.Equal(t, []string{"PowerOn", "boot:disk", "ForceOff", "PowerOn", "boot:disk"}, s.calls(t, uuidA))

	require.ErrorContains(t, c.SetPXEOnce(ctx, "bios"), "unknown boot mode")
}

func TestSessionLogout(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	s := startService(t, "-fake", uuidA)

	var sessions struct{ Members []any }

	c, err := Dial(ctx, endpoint(s))
	require.NoError(t, err)

	s.get(t, "/redfish/v1/SessionService/Sessions", &sessions)
	assert.Len(t, sessions.Members, 1, "the client logged in")

	require.NoError(t, c.Close())
	s.get(t, "/redfish/v1/SessionService/Sessions", &sessions)
	assert.Empty(t, sessions.Members, "Close logged out")
}

func TestPickSystem(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	s := startService(t, "-fake", "1="+uuidA+",Blade.2="+uuidB)

	for _, tc := range []struct {
		name     string
		id, uuid string
		want     []string
	}{
		{"neither id nor UUID", "", "", []string{"2 Redfish systems", "1 (UUID " + uuidA + ")", "Blade.2 (UUID " + uuidB + ")"}},
		{"no such UUID", "", uuidC, []string{"no Redfish system with UUID " + uuidC, "1 (UUID " + uuidA + ")", "Blade.2"}},
		{"no such id", "System.Embedded.1", uuidA, []string{`no Redfish system "System.Embedded.1"`, "Blade.2"}},
	} {
		ep := endpoint(s)
		ep.SystemID, ep.MachineUUID = tc.id, tc.uuid

		c, err := Dial(ctx, ep)
		require.Error(t, err, tc.name)
		assert.Nil(t, c, "no client in a non-nil interface")

		for _, w := range tc.want {
			assert.Contains(t, err.Error(), w, tc.name)
		}
	}

	var sessions struct{ Members []any }
	s.get(t, "/redfish/v1/SessionService/Sessions", &sessions)
	assert.Empty(t, sessions.Members, "a failed dial logs out")
}

func TestWrongCredentials(t *testing.T) {
	t.Parallel()

	for _, args := range [][]string{{}, {"-session-only"}, {"-no-sessions"}} {
		t.Run(strings.Join(append([]string{"default"}, args...), " "), func(t *testing.T) {
			t.Parallel()

			ctx := testContext(t)
			s := startService(t, append([]string{"-fake", uuidA}, args...)...)

			ep := endpoint(s)
			ep.Password = "wrong-" + testPassword

			_, err := Dial(ctx, ep)
			require.ErrorIs(t, err, power.ErrUnauthorized)
			assert.NotErrorIs(t, err, power.ErrUnreachable)
			assert.NotContains(t, err.Error(), testPassword)

			ep.Username = ""
			_, err = Dial(ctx, ep)
			require.ErrorIs(t, err, power.ErrUnauthorized, "no credentials at all")
		})
	}
}

func TestTLSVerification(t *testing.T) {
	t.Parallel()

	ctx := testContext(t)
	s := startService(t, "-fake", uuidA)

	ep := endpoint(s)
	ep.Insecure = false

	_, err := Dial(ctx, ep)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate is not trusted")
	assert.NotErrorIs(t, err, power.ErrUnreachable)
	assert.NotErrorIs(t, err, power.ErrUnauthorized)

	// Verification on, with the service's certificate trusted: it passes.
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM([]byte(s.CertPEM)))

	c, err := dial(ctx, ep, roots)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

func TestUnreachable(t *testing.T) {
	t.Parallel()

	// A port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	closed := ln.Addr().String()
	require.NoError(t, ln.Close())

	// A BMC that accepts and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	t.Cleanup(func() { silent.Close() })

	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}

			t.Cleanup(func() { conn.Close() })
		}
	}()

	for _, addr := range []string{closed, silent.Addr().String()} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()

		_, err := Dial(ctx, power.Endpoint{Address: addr, Username: testUser, Password: testPassword})

		cancel()
		require.ErrorIs(t, err, power.ErrUnreachable, addr)
		assert.Less(t, time.Since(start), 5*time.Second, "bounded by the context")
		assert.NotContains(t, err.Error(), testPassword)
	}
}

func TestBaseURL(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		addr string
		port int
		want string
	}{
		{"10.0.0.5", 0, "https://10.0.0.5"},
		{"10.0.0.5", 8443, "https://10.0.0.5:8443"},
		{"bmc.example", 443, "https://bmc.example:443"},
		{"fd00::5", 0, "https://[fd00::5]"},
		{"fd00::5", 8443, "https://[fd00::5]:8443"},
		{"http://127.0.0.1:8000", 0, "http://127.0.0.1:8000"},
		{"https://127.0.0.1:8000", 9000, "https://127.0.0.1:9000"},
	} {
		got, err := baseURL(power.Endpoint{Address: tc.addr, Port: tc.port})
		require.NoError(t, err, tc.addr)
		assert.Equal(t, tc.want, got, tc.addr)
	}

	for _, bad := range []string{"", "ftp://x", "https://"} {
		_, err := baseURL(power.Endpoint{Address: bad})
		assert.Error(t, err, bad)
	}
}

// fakeBMC serves fixed documents, some of them broken, over TLS.
func fakeBMC(t *testing.T, docs map[string]string) (*httptest.Server, *x509.CertPool) {
	t.Helper()

	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := docs[r.Method+" "+r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)

			return
		}

		code := http.StatusOK
		if c, rest, found := strings.Cut(body, "|"); found && len(c) == 3 {
			code, body = atoi(c), rest
		}

		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)

	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())

	return srv, roots
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		n = n*10 + int(r-'0')
	}

	return n
}

const (
	goodRoot    = `{"@odata.id":"/redfish/v1/","Systems":{"@odata.id":"/redfish/v1/Systems"}}`
	goodSystems = `{"Members":[{"@odata.id":"/redfish/v1/Systems/1"}]}`
	goodSystem  = `{"@odata.id":"/redfish/v1/Systems/1","Id":"1","UUID":"` + uuidA + `","PowerState":"On",` +
		`"Actions":{"#ComputerSystem.Reset":{"target":"/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"}}}`
)

func TestMalformedReplies(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		docs    map[string]string
		op      func(context.Context, power.Client) error
		wantErr string
		wantIs  error
	}{
		{name: "root not JSON", docs: map[string]string{"GET /redfish/v1/": "<html>hello</html>"}, wantErr: "the service root is not a Redfish document"},
		{name: "root truncated", docs: map[string]string{"GET /redfish/v1/": `{"Systems":`}, wantErr: "the service root is not a Redfish document"},
		{name: "systems not JSON", docs: map[string]string{"GET /redfish/v1/": goodRoot, "GET /redfish/v1/Systems": "nope"}, wantErr: "listing the Redfish systems"},
		{name: "systems members wrong type", docs: map[string]string{"GET /redfish/v1/": goodRoot, "GET /redfish/v1/Systems": `{"Members":"x"}`}, wantErr: "listing the Redfish systems"},
		{name: "system not JSON", docs: map[string]string{"GET /redfish/v1/": goodRoot, "GET /redfish/v1/Systems": goodSystems, "GET /redfish/v1/Systems/1": "]["}, wantErr: "listing the Redfish systems"},
		{name: "no systems", docs: map[string]string{"GET /redfish/v1/": goodRoot, "GET /redfish/v1/Systems": `{"Members":[]}`}, wantErr: "no Redfish systems"},
		{name: "systems 403", docs: map[string]string{"GET /redfish/v1/": goodRoot, "GET /redfish/v1/Systems": `403|{"error":{"code":"Base.1.0.InsufficientPrivilege","message":"no"}}`}, wantIs: power.ErrUnauthorized},
		{
			name: "weird power state",
			docs: map[string]string{"GET /redfish/v1/": goodRoot, "GET /redfish/v1/Systems": goodSystems, "GET /redfish/v1/Systems/1": strings.Replace(goodSystem, `"On"`, `"Exploded"`, 1)},
			op: func(ctx context.Context, c power.Client) error {
				_, err := c.PowerState(ctx)

				return err
			},
			wantErr: `power state "Exploded"`,
		},
		{
			name: "reset answers 500 with no JSON",
			docs: map[string]string{"GET /redfish/v1/": goodRoot, "GET /redfish/v1/Systems": goodSystems, "GET /redfish/v1/Systems/1": goodSystem, "POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset": "500|kaput"},
			op:   func(ctx context.Context, c power.Client) error { return c.PowerCycle(ctx) }, wantErr: "kaput",
		},
		{
			name: "no reset action",
			docs: map[string]string{"GET /redfish/v1/": goodRoot, "GET /redfish/v1/Systems": goodSystems, "GET /redfish/v1/Systems/1": `{"@odata.id":"/redfish/v1/Systems/1","Id":"1","PowerState":"On"}`},
			op:   func(ctx context.Context, c power.Client) error { return c.PowerCycle(ctx) }, wantIs: power.ErrUnsupported,
		},
		{
			name: "no pxe target",
			docs: map[string]string{"GET /redfish/v1/": goodRoot, "GET /redfish/v1/Systems": goodSystems, "GET /redfish/v1/Systems/1": strings.Replace(goodSystem, `"PowerState"`, `"Boot":{"BootSourceOverrideTarget@Redfish.AllowableValues":["Hdd","Cd"]},"PowerState"`, 1)},
			op:   func(ctx context.Context, c power.Client) error { return c.SetPXEOnce(ctx, power.BootModeAuto) }, wantIs: power.ErrUnsupported,
		},
		{
			name: "reset types without any that cycles",
			docs: map[string]string{"GET /redfish/v1/": goodRoot, "GET /redfish/v1/Systems": goodSystems, "GET /redfish/v1/Systems/1": strings.Replace(goodSystem, `"target"`, `"ResetType@Redfish.AllowableValues":["Nmi"],"target"`, 1)},
			op:   func(ctx context.Context, c power.Client) error { return c.PowerCycle(ctx) }, wantIs: power.ErrUnsupported,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ctx := testContext(t)
			srv, roots := fakeBMC(t, tc.docs)

			c, err := dial(ctx, power.Endpoint{Address: srv.URL, Username: testUser, Password: testPassword}, roots)
			if tc.op != nil {
				require.NoError(t, err)

				defer c.Close()

				err = tc.op(ctx, c)
			}

			require.Error(t, err)

			if tc.wantErr != "" {
				assert.Contains(t, err.Error(), tc.wantErr)
			}

			if tc.wantIs != nil {
				assert.ErrorIs(t, err, tc.wantIs)
			}

			assert.NotContains(t, err.Error(), testPassword)
		})
	}
}

// TestSlowBMC checks that a BMC answering after the caller's deadline does not hold it.
func TestSlowBMC(t *testing.T) {
	t.Parallel()

	var slow atomic.Bool

	release := make(chan struct{})
	t.Cleanup(func() { close(release) })

	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case slow.Load():
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case r.URL.Path == "/redfish/v1/":
			_, _ = w.Write([]byte(goodRoot))
		case r.URL.Path == "/redfish/v1/Systems":
			_, _ = w.Write([]byte(goodSystems))
		default:
			_, _ = w.Write([]byte(goodSystem))
		}
	}))
	t.Cleanup(srv.Close)

	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())

	c, err := dial(testContext(t), power.Endpoint{Address: srv.URL}, roots)
	require.NoError(t, err)

	defer c.Close()

	slow.Store(true)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()

	start := time.Now()
	_, err = c.PowerState(ctx)

	require.ErrorIs(t, err, power.ErrUnreachable)
	assert.True(t, errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "deadline"), err)
	assert.Less(t, time.Since(start), 3*time.Second)
}
