package redfish_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/redfish"
)

const (
	user     = "admin"
	password = "s3cret"
	uuidA    = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
	uuidB    = "6f1c5c2e-8d0a-4c57-9a37-2f6d7b0e1a01"
)

type auth func(*http.Request)

func basic(u, p string) auth { return func(r *http.Request) { r.SetBasicAuth(u, p) } }
func token(t string) auth    { return func(r *http.Request) { r.Header.Set("X-Auth-Token", t) } }

// do sends one request to the handler and decodes the JSON answer, if any.
func do(t *testing.T, h http.Handler, method, path, body string, a auth) (*http.Response, map[string]any) {
	t.Helper()

	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if a != nil {
		a(r)
	}

	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)

	resp := w.Result()

	var doc map[string]any
	if b, _ := io.ReadAll(resp.Body); len(b) > 0 { // a recorder's body
		require.NoError(t, json.Unmarshal(b, &doc), "%s %s answered %q", method, path, b)
	}

	return resp, doc
}

// errorID is the MessageId of a Redfish error answer.
func errorID(doc map[string]any) string {
	e, _ := doc["error"].(map[string]any)
	code, _ := e["code"].(string)

	return strings.TrimPrefix(code, "Base.1.16.")
}

func newService(t *testing.T, opts redfish.Options) (*redfish.Service, []*redfish.FakeMachine) {
	t.Helper()

	opts.Username, opts.Password = user, password

	var fakes []*redfish.FakeMachine

	if opts.Systems == nil {
		opts.Systems = []redfish.System{{}}
	}

	for i := range opts.Systems {
		if opts.Systems[i].Machine == nil {
			f := redfish.NewFakeMachine([]string{uuidA, uuidB}[i%2], "m", false)
			opts.Systems[i].Machine = f
			fakes = append(fakes, f)
		}
	}

	svc, err := redfish.New(opts)
	require.NoError(t, err)

	return svc, fakes
}

func TestServiceRoot(t *testing.T) {
	t.Parallel()

	svc, _ := newService(t, redfish.Options{})

	resp, doc := do(t, svc, http.MethodGet, "/redfish/v1/", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the root is open")
	assert.Equal(t, "/redfish/v1/", doc["@odata.id"])
	assert.Contains(t, doc["@odata.type"], "#ServiceRoot.")
	assert.Equal(t, map[string]any{"@odata.id": "/redfish/v1/Systems"}, doc["Systems"])
	assert.Equal(t, map[string]any{"@odata.id": "/redfish/v1/SessionService"}, doc["SessionService"])
	assert.Equal(t, map[string]any{"Sessions": map[string]any{"@odata.id": "/redfish/v1/SessionService/Sessions"}}, doc["Links"])

	noSessions, _ := newService(t, redfish.Options{NoSessions: true})
	_, doc = do(t, noSessions, http.MethodGet, "/redfish/v1", "", nil)
	assert.NotContains(t, doc, "SessionService")
}

func TestAuth(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		opts redfish.Options
		auth auth
		want int
	}{
		{"no credentials", redfish.Options{}, nil, http.StatusUnauthorized},
		{"wrong password", redfish.Options{}, basic(user, "wrong"), http.StatusUnauthorized},
		{"wrong user", redfish.Options{}, basic("root", password), http.StatusUnauthorized},
		{"basic", redfish.Options{}, basic(user, password), http.StatusOK},
		{"basic refused when session-only", redfish.Options{SessionOnly: true}, basic(user, password), http.StatusUnauthorized},
		{"unknown token", redfish.Options{}, token("0123"), http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			svc, _ := newService(t, tc.opts)
			resp, doc := do(t, svc, http.MethodGet, "/redfish/v1/Systems", "", tc.auth)
			assert.Equal(t, tc.want, resp.StatusCode)

			if tc.want == http.StatusUnauthorized {
				assert.Equal(t, "NoValidSession", errorID(doc))
				assert.Equal(t, !tc.opts.SessionOnly, resp.Header.Get("WWW-Authenticate") != "")
			}
		})
	}
}

func TestSessions(t *testing.T) {
	t.Parallel()

	svc, _ := newService(t, redfish.Options{SessionOnly: true})

	for _, tc := range []struct {
		body   string
		want   int
		wantID string
	}{
		{`{"UserName":"admin","Password":"wrong"}`, http.StatusUnauthorized, "NoValidSession"},
		{`{"UserName":"admin"`, http.StatusBadRequest, "MalformedJSON"},
		{``, http.StatusBadRequest, "MalformedJSON"},
		{`{"UserName":"admin"}`, http.StatusBadRequest, "PropertyMissing"},
		{`[1,2]`, http.StatusBadRequest, "MalformedJSON"},
	} {
		resp, doc := do(t, svc, http.MethodPost, "/redfish/v1/SessionService/Sessions", tc.body, nil)
		assert.Equal(t, tc.want, resp.StatusCode, tc.body)
		assert.Equal(t, tc.wantID, errorID(doc), tc.body)
	}

	assert.Zero(t, svc.Sessions())

	resp, doc := do(t, svc, http.MethodPost, "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"s3cret"}`, nil)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	tok, loc := resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
	require.NotEmpty(t, tok)
	assert.Equal(t, loc, doc["@odata.id"])
	assert.Equal(t, 1, svc.Sessions())

	resp, _ = do(t, svc, http.MethodGet, "/redfish/v1/Systems/1", "", token(tok))
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	_, doc = do(t, svc, http.MethodGet, "/redfish/v1/SessionService/Sessions", "", token(tok))
	assert.EqualValues(t, 1, doc["Members@odata.count"])

	resp, _ = do(t, svc, http.MethodDelete, loc, "", token(tok))
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Zero(t, svc.Sessions())

	resp, _ = do(t, svc, http.MethodGet, "/redfish/v1/Systems/1", "", token(tok))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the token ends with its session")
}

func TestSystems(t *testing.T) {
	t.Parallel()

	svc, _ := newService(t, redfish.Options{Systems: []redfish.System{
		{ID: "System.Embedded.1", Manufacturer: "Dell Inc.", Model: "PowerEdge R630", SerialNumber: "S1"},
		{ID: "Blade.2"},
	}})
	a := basic(user, password)

	_, doc := do(t, svc, http.MethodGet, "/redfish/v1/Systems", "", a)
	assert.Equal(t, []any{
		map[string]any{"@odata.id": "/redfish/v1/Systems/System.Embedded.1"},
		map[string]any{"@odata.id": "/redfish/v1/Systems/Blade.2"},
	}, doc["Members"])

	resp, doc := do(t, svc, http.MethodGet, "/redfish/v1/Systems/System.Embedded.1", "", a)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "System.Embedded.1", doc["Id"])
	assert.Equal(t, uuidA, doc["UUID"])
	assert.Equal(t, "Off", doc["PowerState"])
	assert.Equal(t, "Dell Inc.", doc["Manufacturer"])
	assert.Equal(t, "PowerEdge R630", doc["Model"])
	assert.Equal(t, "S1", doc["SerialNumber"])

	boot, _ := doc["Boot"].(map[string]any)
	assert.Equal(t, "Disabled", boot["BootSourceOverrideEnabled"])
	assert.Equal(t, "None", boot["BootSourceOverrideTarget"])
	assert.Equal(t, "UEFI", boot["BootSourceOverrideMode"])
	assert.Equal(t, []any{"None", "Pxe"}, boot["BootSourceOverrideTarget@Redfish.AllowableValues"])

	actions, _ := doc["Actions"].(map[string]any)
	reset, _ := actions["#ComputerSystem.Reset"].(map[string]any)
	assert.Equal(t, "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset", reset["target"])
	assert.Len(t, reset["ResetType@Redfish.AllowableValues"], len(redfish.DefaultResetTypes))

	_, doc = do(t, svc, http.MethodGet, "/redfish/v1/Systems/Blade.2", "", a)
	assert.Equal(t, uuidB, doc["UUID"])

	resp, doc = do(t, svc, http.MethodGet, "/redfish/v1/Systems/1", "", a)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, "ResourceNotFound", errorID(doc))

	resp, doc = do(t, svc, http.MethodDelete, "/redfish/v1/Systems/Blade.2", "", a)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "OperationNotAllowed", errorID(doc))
}

func TestPatchBoot(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name         string
		opts         redfish.Options
		body         string
		want         int
		wantID       string
		wantNetwork  bool
		wantMode     any
		preset, path string
	}{
		{name: "pxe once uefi", body: `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once","BootSourceOverrideMode":"UEFI"}}`, want: 200, wantNetwork: true, wantMode: "UEFI"},
		{name: "pxe once legacy", body: `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once","BootSourceOverrideMode":"Legacy"}}`, want: 200, wantNetwork: true, wantMode: "Legacy"},
		{name: "target alone arms once", body: `{"Boot":{"BootSourceOverrideTarget":"Pxe"}}`, want: 200, wantNetwork: true, wantMode: "UEFI"},
		{name: "disabled cancels", preset: "pxe", body: `{"Boot":{"BootSourceOverrideEnabled":"Disabled"}}`, want: 200, wantMode: "UEFI"},
		{name: "target none cancels", preset: "pxe", body: `{"Boot":{"BootSourceOverrideTarget":"None"}}`, want: 200, wantMode: "UEFI"},
		{name: "malformed", body: `{"Boot":`, want: 400, wantID: "MalformedJSON"},
		{name: "trailing data", body: `{"Boot":{}} {}`, want: 400, wantID: "MalformedJSON"},
		{name: "not an object", body: `"Boot"`, want: 400, wantID: "MalformedJSON"},
		{name: "boot not an object", body: `{"Boot":3}`, want: 400, wantID: "PropertyValueTypeError"},
		{name: "other property", body: `{"AssetTag":"x"}`, want: 400, wantID: "PropertyNotWritable"},
		{name: "unknown boot property", body: `{"Boot":{"BootNext":"0001"}}`, want: 400, wantID: "PropertyUnknown"},
		{name: "continuous", body: `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Continuous"}}`, want: 400, wantID: "PropertyValueNotInList"},
		{name: "unknown target", body: `{"Boot":{"BootSourceOverrideTarget":"Floppy"}}`, want: 400, wantID: "PropertyValueNotInList"},
		{name: "target not a string", body: `{"Boot":{"BootSourceOverrideTarget":1}}`, want: 400, wantID: "PropertyValueTypeError"},
		{name: "mode unsupported", opts: redfish.Options{NoBootMode: true}, body: `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideMode":"UEFI"}}`, want: 400, wantID: "PropertyUnknown"},
		{name: "no mode", opts: redfish.Options{NoBootMode: true}, body: `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once"}}`, want: 200, wantNetwork: true},
		{name: "unknown system", path: "/redfish/v1/Systems/9", body: `{"Boot":{}}`, want: 404, wantID: "ResourceNotFound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			svc, fakes := newService(t, tc.opts)
			ctx := context.Background()
			require.NoError(t, fakes[0].SetNextBootNetwork(ctx, tc.preset == "pxe"))

			path := tc.path
			if path == "" {
				path = "/redfish/v1/Systems/1"
			}

			resp, doc := do(t, svc, http.MethodPatch, path, tc.body, basic(user, password))
			assert.Equal(t, tc.want, resp.StatusCode)
			assert.Equal(t, tc.wantID, errorID(doc))

			network, err := fakes[0].NextBootNetwork(ctx)
			require.NoError(t, err)

			if tc.want != http.StatusOK {
				assert.Equal(t, tc.preset == "pxe", network, "a refused PATCH changes nothing")

				return
			}

			assert.Equal(t, tc.wantNetwork, network)

			boot, _ := doc["Boot"].(map[string]any)
			assert.Equal(t, tc.wantMode, boot["BootSourceOverrideMode"])

			if tc.wantNetwork {
				assert.Equal(t, "Once", boot["BootSourceOverrideEnabled"])
				assert.Equal(t, "Pxe", boot["BootSourceOverrideTarget"])
			} else {
				assert.Equal(t, "Disabled", boot["BootSourceOverrideEnabled"])
			}
		})
	}
}

func TestReset(t *testing.T) {
	t.Parallel()

	limited := []string{redfish.ResetOn, redfish.ResetForceOff, redfish.ResetPowerCycle}

	for _, tc := range []struct {
		name      string
		opts      redfish.Options
		on        bool
		body      string
		want      int
		wantID    string
		wantCalls []string
		wantOn    bool
	}{
		{name: "on", body: `{"ResetType":"On"}`, want: 204, wantCalls: []string{"PowerOn", "boot:disk"}, wantOn: true},
		{name: "on when on", on: true, body: `{"ResetType":"On"}`, want: 204, wantOn: true},
		{name: "force off", on: true, body: `{"ResetType":"ForceOff"}`, want: 204, wantCalls: []string{"ForceOff"}},
		{name: "graceful shutdown is a cut", on: true, body: `{"ResetType":"GracefulShutdown"}`, want: 204, wantCalls: []string{"ForceOff"}},
		{name: "force restart", on: true, body: `{"ResetType":"ForceRestart"}`, want: 204, wantCalls: []string{"Reset", "boot:disk"}, wantOn: true},
		{name: "force restart when off", body: `{"ResetType":"ForceRestart"}`, want: 409, wantID: "ResourceInUse"},
		{name: "power cycle", on: true, body: `{"ResetType":"PowerCycle"}`, want: 204, wantCalls: []string{"ForceOff", "PowerOn", "boot:disk"}, wantOn: true},
		{name: "power cycle when off", body: `{"ResetType":"PowerCycle"}`, want: 204, wantCalls: []string{"PowerOn", "boot:disk"}, wantOn: true},
		{name: "push button", on: true, body: `{"ResetType":"PushPowerButton"}`, want: 204, wantCalls: []string{"ForceOff"}},
		{name: "not offered", opts: redfish.Options{ResetTypes: limited}, on: true, body: `{"ResetType":"ForceRestart"}`, want: 400, wantID: "ActionParameterValueNotInList", wantOn: true},
		{name: "not offered, not listed", opts: redfish.Options{ResetTypes: limited, NoResetAllowableValues: true}, on: true, body: `{"ResetType":"ForceRestart"}`, want: 400, wantID: "ActionParameterValueNotInList", wantOn: true},
		{name: "unknown type", body: `{"ResetType":"Nmi"}`, want: 400, wantID: "ActionParameterValueNotInList"},
		{name: "missing type", body: `{}`, want: 400, wantID: "ActionParameterMissing"},
		{name: "malformed", body: `{"ResetType":On}`, want: 400, wantID: "MalformedJSON"},
		{name: "type not a string", body: `{"ResetType":1}`, want: 400, wantID: "MalformedJSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			f := redfish.NewFakeMachine(uuidA, "m", tc.on)
			tc.opts.Systems = []redfish.System{{Machine: f}}
			svc, _ := newService(t, tc.opts)

			resp, doc := do(t, svc, http.MethodPost, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", tc.body, basic(user, password))
			assert.Equal(t, tc.want, resp.StatusCode)
			assert.Equal(t, tc.wantID, errorID(doc))
			assert.Equal(t, tc.wantCalls, f.Calls())

			on, err := f.PowerState(context.Background())
			require.NoError(t, err)
			assert.Equal(t, tc.wantOn, on)
		})
	}

	svc, _ := newService(t, redfish.Options{})
	resp, _ := do(t, svc, http.MethodGet, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", "", basic(user, password))
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	unlisted, _ := newService(t, redfish.Options{NoResetAllowableValues: true})
	_, doc := do(t, unlisted, http.MethodGet, "/redfish/v1/Systems/1", "", basic(user, password))
	actions, _ := doc["Actions"].(map[string]any)
	reset, _ := actions["#ComputerSystem.Reset"].(map[string]any)
	assert.Contains(t, reset, "target")
	assert.NotContains(t, reset, "ResetType@Redfish.AllowableValues")
}

// TestOverrideThenCycle is the provisioning sequence: PXE once, power cycle; the boot
// after that one is from disk again.
func TestOverrideThenCycle(t *testing.T) {
	t.Parallel()

	f := redfish.NewFakeMachine(uuidA, "m", true)
	svc, _ := newService(t, redfish.Options{Systems: []redfish.System{{Machine: f}}})
	a := basic(user, password)

	resp, _ := do(t, svc, http.MethodPatch, "/redfish/v1/Systems/1", `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once"}}`, a)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	for _, rt := range []string{"ForceRestart", "ForceRestart"} {
		resp, _ = do(t, svc, http.MethodPost, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", `{"ResetType":"`+rt+`"}`, a)
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}

	assert.Equal(t, []string{"Reset", "boot:network", "Reset", "boot:disk"}, f.Calls())

	_, doc := do(t, svc, http.MethodGet, "/redfish/v1/Systems/1", "", a)
	boot, _ := doc["Boot"].(map[string]any)
	assert.Equal(t, "Disabled", boot["BootSourceOverrideEnabled"], "the override is spent")
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()

	f := redfish.NewFakeMachine(uuidA, "m", false)

	for _, opts := range []redfish.Options{
		{},
		{Systems: []redfish.System{{}}},
		{Systems: []redfish.System{{ID: "a", Machine: f}, {ID: "a", Machine: f}}},
		{Systems: []redfish.System{{ID: "a/b", Machine: f}}},
		{Systems: []redfish.System{{Machine: f}}, ResetTypes: []string{"Explode"}},
		{Systems: []redfish.System{{Machine: f}}, SessionOnly: true, NoSessions: true},
		{Systems: []redfish.System{{Machine: f, BootMode: "EFI"}}},
	} {
		_, err := redfish.New(opts)
		assert.Error(t, err, "%+v", opts)
	}
}

func TestServe(t *testing.T) {
	t.Parallel()

	svc, _ := newService(t, redfish.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	srv, err := redfish.Serve(ctx, svc, redfish.ServeOptions{HTTPSAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"})
	require.NoError(t, err)

	t.Cleanup(func() { assert.NoError(t, srv.Close()) })

	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(srv.CertPEM))

	verifying := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}

	for _, tc := range []struct {
		client *http.Client
		url    string
		ok     bool
	}{
		{verifying, srv.URL, true},
		{http.DefaultClient, srv.URL, false}, // self-signed: not trusted by default
		{http.DefaultClient, srv.HTTPURL, true},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, tc.url+"/redfish/v1/", nil)
		require.NoError(t, err)

		resp, err := tc.client.Do(req)
		if !tc.ok {
			var verr *tls.CertificateVerificationError
			assert.ErrorAs(t, err, &verr)

			continue
		}

		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		resp.Body.Close()
	}

	assert.Contains(t, srv.Cert.IPAddresses[0].String(), "127.0.0.1")
}
