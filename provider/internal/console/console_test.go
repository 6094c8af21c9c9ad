package console_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/console"
	"github.com/anvil-metal/anvil/provider/internal/pki"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

const machineID = "4c4c4544-0000-1000-8000-000000000001"

type fixture struct {
	st     *resources.Store
	srv    *httptest.Server
	client *http.Client
	token  string
	dir    string
	trace  *boottrace.Recorder
}

// newFixture runs the console over TLS on a store of its own with one known machine,
// its token made as on a first start; omniURL puts it in Omni mode.
func newFixture(t *testing.T, omniURL string) *fixture {
	t.Helper()

	dir := t.TempDir()

	st, err := resources.Open(t.Context(), dir)
	require.NoError(t, err)

	t.Cleanup(func() { require.NoError(t, st.Close()) })

	m := resources.NewMachine(machineID)
	m.TypedSpec().UUID = machineID
	m.TypedSpec().Firmware = "bios"
	m.TypedSpec().LastAddress = "10.50.0.101"
	require.NoError(t, st.Create(t.Context(), m))

	hash, created, err := console.LoadToken(dir)
	require.NoError(t, err)
	require.True(t, created)

	token, err := os.ReadFile(filepath.Join(dir, console.TokenFile))
	require.NoError(t, err)

	ca, err := pki.Load(dir)
	require.NoError(t, err)

	trace := boottrace.New(nil)

	managedBy := ""
	if omniURL != "" {
		managedBy = "Omni at " + omniURL
	}

	c, err := console.New(console.Options{
		State: st, Transitions: transitions.New(st, transitions.Options{ManagedBy: managedBy}),
		Trace: trace, TokenHash: hash, OmniURL: omniURL,
	})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- c.Run(ctx) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	srv := httptest.NewUnstartedServer(c.Handler())
	srv.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool()}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	return &fixture{st: st, srv: srv, client: newClient(t, srv, nil), token: strings.TrimSpace(string(token)), dir: dir, trace: trace}
}

// newClient is a browser: cookies kept, redirects not followed (the tests look at them).
func newClient(t *testing.T, srv *httptest.Server, cert *tls.Certificate) *http.Client {
	t.Helper()

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)

	client := srv.Client()
	client.Jar = jar
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	if cert != nil {
		tr := client.Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		client.Transport = tr
	}

	return client
}

func (f *fixture) get(t *testing.T, path string) (int, string, http.Header) {
	t.Helper()

	resp, err := f.client.Get(f.srv.URL + path)
	require.NoError(t, err)

	defer resp.Body.Close()

	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	return resp.StatusCode, string(body), resp.Header
}

func (f *fixture) post(t *testing.T, path string, form url.Values, origin string) (int, string, http.Header) {
	t.Helper()

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")

	if origin != "" {
		req.Header.Set("Origin", origin)
	}

	resp, err := f.client.Do(req)
	require.NoError(t, err)

	defer resp.Body.Close()

	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	return resp.StatusCode, string(body), resp.Header
}

// login logs in with the token and returns the session's CSRF token.
func (f *fixture) login(t *testing.T) string {
	t.Helper()

	code, _, h := f.post(t, "/ui/login", url.Values{"token": {f.token}, "next": {"/ui/machines/" + machineID}}, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/ui/machines/"+machineID, h.Get("Location"))

	return f.csrf(t)
}

func (f *fixture) csrf(t *testing.T) string {
	t.Helper()

	code, body, _ := f.get(t, "/ui/machines/"+machineID)
	require.Equal(t, http.StatusOK, code)

	const marker = `name="csrf" value="`

	i := strings.Index(body, marker)
	require.GreaterOrEqual(t, i, 0, "no CSRF token on the page")

	rest := body[i+len(marker):]

	return rest[:strings.IndexByte(rest, '"')]
}

func (f *fixture) intent(t *testing.T) *resources.MachineIntentSpec {
	t.Helper()

	in, err := safe.StateGetByID[*resources.MachineIntent](t.Context(), f.st, machineID)
	if err != nil {
		return nil
	}

	return in.TypedSpec()
}

func TestLoadToken(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()

	hash, created, err := console.LoadToken(dir)
	require.NoError(t, err)
	assert.True(t, created)

	fi, err := os.Stat(filepath.Join(dir, console.TokenFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	token, err := os.ReadFile(filepath.Join(dir, console.TokenFile))
	require.NoError(t, err)
	assert.Equal(t, sha256.Sum256([]byte(strings.TrimSpace(string(token)))), hash)

	// The hash is what is kept: the token file may go, the login stays the same.
	require.NoError(t, os.Remove(filepath.Join(dir, console.TokenFile)))

	again, created, err := console.LoadToken(dir)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, hash, again)

	hashFile, err := os.ReadFile(filepath.Join(dir, console.TokenHashFile))
	require.NoError(t, err)
	assert.NotContains(t, string(hashFile), strings.TrimSpace(string(token)))

	require.NoError(t, os.WriteFile(filepath.Join(dir, console.TokenHashFile), []byte("not hex\n"), 0o600))

	_, _, err = console.LoadToken(dir)
	require.ErrorContains(t, err, "is not a SHA-256")
}

func TestLogin(t *testing.T) {
	t.Parallel()

	f := newFixture(t, "")

	// Nothing without a session: pages go to the login, posts and the live stream are refused.
	code, _, h := f.get(t, "/ui/")
	assert.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, "/ui/login?next=%2Fui%2F", h.Get("Location"))

	code, _, _ = f.get(t, "/ui/live?view=machines")
	assert.Equal(t, http.StatusUnauthorized, code)

	code, _, _ = f.post(t, "/ui/machines/"+machineID+"/accept", url.Values{"confirmed": {"yes"}}, "")
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Nil(t, f.intent(t))

	code, body, _ := f.get(t, "/ui/login")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "ui-token")

	code, body, h = f.post(t, "/ui/login", url.Values{"token": {"anvil-wrong"}}, "")
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Contains(t, body, "not the console&#39;s token")
	assert.Empty(t, h.Values("Set-Cookie"))

	// A login posted from another site is refused even with the token.
	code, _, _ = f.post(t, "/ui/login", url.Values{"token": {f.token}}, "https://evil.example")
	assert.Equal(t, http.StatusForbidden, code)

	f.login(t)

	code, body, h = f.get(t, "/ui/")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, machineID)
	assert.Contains(t, body, "10.50.0.101")
	assert.Contains(t, h.Get("Content-Security-Policy"), "default-src 'self'")

	// An open redirect is not offered by the login.
	code, _, h = f.post(t, "/ui/login", url.Values{"token": {f.token}, "next": {"//evil.example/"}}, "")
	assert.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, "/ui/", h.Get("Location"))

	csrf := f.csrf(t)

	code, _, _ = f.post(t, "/ui/logout", url.Values{"csrf": {csrf}}, "")
	assert.Equal(t, http.StatusSeeOther, code)

	code, _, _ = f.get(t, "/ui/")
	assert.Equal(t, http.StatusSeeOther, code, "the session ended with the logout")
}

func TestClientCertificate(t *testing.T) {
	t.Parallel()

	f := newFixture(t, "")

	admin, err := tls.LoadX509KeyPair(filepath.Join(f.dir, pki.AdminCertFile), filepath.Join(f.dir, pki.AdminKeyFile))
	require.NoError(t, err)

	f.client = newClient(t, f.srv, &admin)

	code, body, _ := f.get(t, "/ui/")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "certificate anvil-admin")
}

func TestActions(t *testing.T) {
	t.Parallel()

	f := newFixture(t, "")
	csrf := f.login(t)
	path := "/ui/machines/" + machineID

	// Without its CSRF token, or from another site, nothing is done.
	code, _, _ := f.post(t, path+"/accept", url.Values{"confirmed": {"yes"}}, "")
	assert.Equal(t, http.StatusForbidden, code)
	code, _, _ = f.post(t, path+"/accept", url.Values{"confirmed": {"yes"}, "csrf": {csrf}}, "https://evil.example")
	assert.Equal(t, http.StatusForbidden, code)
	assert.Nil(t, f.intent(t))

	// First the confirmation, which changes nothing.
	code, body, _ := f.post(t, path+"/accept", url.Values{"csrf": {csrf}}, f.srv.URL)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "its agent will wipe every disk")
	assert.Contains(t, body, `name="confirmed" value="yes"`)
	assert.Nil(t, f.intent(t))

	code, _, h := f.post(t, path+"/accept", url.Values{"csrf": {csrf}, "confirmed": {"yes"}}, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, path+"?done=accepted", h.Get("Location"))
	assert.Equal(t, resources.AcceptanceAccepted, f.intent(t).Acceptance)

	code, body, _ = f.get(t, path+"?done=accepted")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "Done: accepted.")
	assert.Contains(t, body, "accepted from the console (token)", "the action is in the recent events")

	// Cordoned, it is not handed out: an allocation is refused.
	code, _, _ = f.post(t, path+"/cordon", url.Values{"csrf": {csrf}, "cordoned": {"true"}}, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)

	before := f.intent(t)
	require.True(t, before.Cordoned)

	for _, tc := range []struct {
		name   string
		action string
		form   url.Values
		code   int
		msg    string
	}{
		{"bad version", "allocate", url.Values{"talos_version": {"1.x"}}, http.StatusBadRequest, "Allocate: "},
		{"cordoned", "allocate", url.Values{"talos_version": {"v1.13.9"}}, http.StatusConflict, "Allocate: "},
		{"label without value", "labels", url.Values{"set": {"rack"}}, http.StatusBadRequest, "label &#34;rack&#34; is not key=value"},
		{"reserved label", "labels", url.Values{"set": {"anvil.dev/x=1"}}, http.StatusBadRequest, "Set labels: "},
		{"bad power", "power", url.Values{"power": {"sideways"}}, http.StatusBadRequest, "power &#34;sideways&#34; is not one of on, off, default"},
		{"bad BMC port", "bmc", url.Values{"backend": {"ipmi"}, "address": {"10.0.0.1"}, "port": {"99999"}, "password": {"hunter2"}}, http.StatusBadRequest, "is not a port number"},
		{"bad BMC backend", "bmc", url.Values{"backend": {"telnet"}, "address": {"10.0.0.1"}, "password": {"hunter2"}}, http.StatusBadRequest, "Set BMC: "},
		{"bad wipe mode", "wipe-mode", url.Values{"wipe_mode": {"shred"}}, http.StatusBadRequest, "Set wipe mode: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{"csrf": {csrf}, "confirmed": {"yes"}}
			for k, v := range tc.form {
				form[k] = v
			}

			code, body, _ := f.post(t, path+"/"+tc.action, form, f.srv.URL)
			assert.Equal(t, tc.code, code, body)
			assert.Contains(t, body, tc.msg)
			assert.NotContains(t, body, "hunter2", "a password is never sent back")
			assert.Equal(t, before, f.intent(t), "a refused action changes nothing")
		})
	}

	code, _, _ = f.post(t, path+"/labels", url.Values{"csrf": {csrf}, "set": {"rack=r1 role=storage"}}, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, map[string]string{"rack": "r1", "role": "storage"}, f.intent(t).Labels)

	code, _, _ = f.post(t, path+"/bmc", url.Values{"csrf": {csrf}, "backend": {"ipmi"}, "address": {"10.0.0.21"}, "port": {"623"}, "username": {"admin"}, "password": {"hunter2"}}, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)

	code, body, _ = f.get(t, path)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "10.0.0.21:623")
	assert.Contains(t, body, "set (never shown)")
	assert.NotContains(t, body, "hunter2")

	code, _, _ = f.post(t, path+"/nope", url.Values{"csrf": {csrf}}, f.srv.URL)
	assert.Equal(t, http.StatusNotFound, code)

	// Allocate with an uploaded config: it reaches the allocation byte for byte, through
	// the confirmation page (which carries it as base64: browsers turn a form value's
	// line ends into CRLF).
	code, _, _ = f.post(t, path+"/cordon", url.Values{"csrf": {csrf}, "cordoned": {"false"}}, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)

	config := "version: v1alpha1\nmachine:\n  type: worker\n"

	var upload bytes.Buffer

	mw := multipart.NewWriter(&upload)
	require.NoError(t, mw.WriteField("csrf", csrf))
	require.NoError(t, mw.WriteField("talos_version", "v1.13.9"))

	fw, err := mw.CreateFormFile("config", "worker.yaml")
	require.NoError(t, err)

	_, err = fw.Write([]byte(config))
	require.NoError(t, err)
	require.NoError(t, mw.Close())

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.srv.URL+path+"/allocate", &upload)
	require.NoError(t, err)
	req.Header.Set("Content-Type", mw.FormDataContentType())

	resp, err := f.client.Do(req)
	require.NoError(t, err)

	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()

	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(page), fmt.Sprintf("a machine config of %d bytes", len(config)))
	assert.Nil(t, f.intent(t).Allocation, "nothing allocated before the confirmation")

	b64 := base64.StdEncoding.EncodeToString([]byte(config))
	assert.Contains(t, string(page), `name="config_b64" value="`+b64+`"`)

	code, _, _ = f.post(t, path+"/allocate", url.Values{"csrf": {csrf}, "confirmed": {"yes"}, "talos_version": {"v1.13.9"}, "config_b64": {b64}}, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)

	alloc := f.intent(t).Allocation
	require.NotNil(t, alloc)
	assert.Equal(t, "v1.13.9", alloc.TalosVersion)
	assert.Equal(t, config, alloc.Config)
}

func TestOmniMode(t *testing.T) {
	t.Parallel()

	f := newFixture(t, "https://omni.example")
	csrf := f.login(t)
	path := "/ui/machines/" + machineID

	code, body, _ := f.get(t, path)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "Omni's to decide")
	assert.Contains(t, body, `href="https://omni.example"`)
	assert.NotContains(t, body, `id="accept"`)
	assert.NotContains(t, body, `id="allocate"`)
	assert.Contains(t, body, `id="labels"`, "labels stay Anvil's")

	code, body, _ = f.post(t, path+"/accept", url.Values{"csrf": {csrf}, "confirmed": {"yes"}}, f.srv.URL)
	assert.Equal(t, http.StatusForbidden, code)
	assert.Contains(t, body, "do it in Omni")
	assert.Nil(t, f.intent(t))
}

func TestFilter(t *testing.T) {
	t.Parallel()

	f := newFixture(t, "")
	f.login(t)

	code, body, _ := f.get(t, "/ui/?selector="+url.QueryEscape("rack in (a"))
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "label selector: ")

	code, body, _ = f.get(t, "/ui/?q=10.50.0.101")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `data-id="`+machineID+`"`)

	code, body, _ = f.get(t, "/ui/?q=nothing-like-it")
	require.Equal(t, http.StatusOK, code)
	assert.NotContains(t, body, `data-id="`+machineID+`"`)
	assert.Contains(t, body, "No machine matches the filter.")
}

// stream opens a live stream and returns its events' data.
func (f *fixture) stream(t *testing.T, query string) <-chan string {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/ui/live?"+query, nil)
	require.NoError(t, err)

	resp, err := f.client.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })

	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	events := make(chan string, 16)

	go func() {
		defer close(events)

		var data strings.Builder

		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()

			switch {
			case strings.HasPrefix(line, "data: "):
				data.WriteString(strings.TrimPrefix(line, "data: ") + "\n")
			case line == "" && data.Len() > 0:
				events <- data.String()

				data.Reset()
			}
		}
	}()

	return events
}

// TestLive follows the table's stream: a machine that boots appears in it.
func TestLive(t *testing.T) {
	t.Parallel()

	f := newFixture(t, "")
	f.login(t)

	events := f.stream(t, "view=machines")

	first := <-events
	assert.Contains(t, first, machineID)

	const second = "4c4c4544-0000-1000-8000-000000000002"

	m := resources.NewMachine(second)
	m.TypedSpec().UUID = second
	require.NoError(t, f.st.Create(t.Context(), m))

	for ev := range events {
		if strings.Contains(ev, second) {
			assert.Contains(t, ev, "2</span> of 2 machines")

			return
		}
	}

	t.Fatal("the new machine never reached the live table")
}

// TestLiveMachine follows a machine's page: its fragment's forms carry the session's
// CSRF token (a redrawn button must still post), and a change shows up.
func TestLiveMachine(t *testing.T) {
	t.Parallel()

	f := newFixture(t, "")
	csrf := f.login(t)

	events := f.stream(t, "view=machine&id="+machineID)

	first := <-events
	assert.Contains(t, first, `name="csrf" value="`+csrf+`"`)
	assert.Contains(t, first, `id="accept"`)

	f.trace.Note(machineID, "a note for the page")

	for ev := range events {
		if strings.Contains(ev, "a note for the page") {
			return
		}
	}

	t.Fatal("the machine's change never reached its live page")
}

// TestInstallDiskAndWipeScope: the Allocate form's install disk is resolved on the
// confirmation page, before anything is allocated, and an ambiguous one is refused with
// the candidates; the machine's page shows the chosen disk, its wipe scope, and the disks
// its last wipe kept.
func TestInstallDiskAndWipeScope(t *testing.T) {
	t.Parallel()

	f := newFixture(t, "")
	csrf := f.login(t)
	path := "/ui/machines/" + machineID
	ctx := t.Context()

	inv := resources.NewMachineInventory(machineID)
	inv.TypedSpec().Disks = []resources.DiskInventory{
		{Name: "nvme0n1", Size: 960_197_124_096, Model: "SAMSUNG MZQL2960HCJR", Serial: "S64FNE0R801234", Transport: "nvme"},
		{Name: "nvme1n1", Size: 3_840_755_982_336, Model: "SAMSUNG MZQL23T8HCLS", Serial: "S64HNE0T905678", Transport: "nvme"},
		{Name: "sda", Size: 16_000_900_661_248, Model: "ST16000NM001G", Serial: "ZL2ABC01", Transport: "sas", Rotational: true},
	}
	inv.TypedSpec().Arrays = []resources.ArrayInventory{{Kind: "md", ID: "a1a20001-0203", Name: "host:data", Members: []string{"nvme1n1p2", "sda1"}}}
	require.NoError(t, f.st.Create(ctx, inv))

	code, _, _ := f.post(t, path+"/accept", url.Values{"csrf": {csrf}, "confirmed": {"yes"}, "skip_wipe": {"on"}}, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)

	// Ambiguous: refused before the confirmation, the candidates listed.
	code, body, _ := f.post(t, path+"/allocate", url.Values{"csrf": {csrf}, "talos_version": {"v1.13.9"}, "install_disk": {"type=nvme"}}, f.srv.URL)
	assert.Equal(t, http.StatusConflict, code)
	assert.Contains(t, body, "matches 2 disks")
	assert.Contains(t, body, "nvme0n1 (960 GB")
	assert.Contains(t, body, "nvme1n1 (3.8 TB")
	assert.Contains(t, body, `value="type=nvme"`, "the form comes back as sent")
	assert.Nil(t, f.intent(t).Allocation)

	// Resolved: the confirmation page names the disk; nothing is allocated yet.
	form := url.Values{"csrf": {csrf}, "talos_version": {"v1.13.9"}, "install_disk": {"type=nvme,size>=400GB,pick=smallest"}}
	code, body, _ = f.post(t, path+"/allocate", form, f.srv.URL)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "Talos installs to nvme0n1 (960 GB, transport nvme, model SAMSUNG MZQL2960HCJR, serial S64FNE0R801234), named serial=S64FNE0R801234")
	assert.Nil(t, f.intent(t).Allocation, "nothing allocated before the confirmation")

	form.Set("confirmed", "yes")
	code, _, _ = f.post(t, path+"/allocate", form, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)

	alloc := f.intent(t).Allocation
	require.NotNil(t, alloc)
	require.NotNil(t, alloc.InstallDisk)
	assert.Equal(t, "serial=S64FNE0R801234", alloc.InstallDisk.Identity)

	// The wipe scope, and an erase report with a kept disk.
	code, _, _ = f.post(t, path+"/wipe-scope", url.Values{"csrf": {csrf}, "confirmed": {"yes"}, "wipe_scope": {"all-except"}, "wipe_keep": {"model=ST16000*"}}, f.srv.URL)
	require.Equal(t, http.StatusSeeOther, code)

	code, body, _ = f.post(t, path+"/wipe-scope", url.Values{"csrf": {csrf}, "confirmed": {"yes"}, "wipe_scope": {"all-except"}}, f.srv.URL)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "needs a selector of the disks to keep")

	ms := resources.NewMachineStatus(machineID)
	ms.TypedSpec().LastWipe = &resources.WipeRecord{ID: "w1", Disks: []resources.DiskWiped{
		{Device: "nvme0n1", Method: "discard, zeroed edges", Verified: "3 regions read back as zeroes"},
		{Device: "sda", Skipped: "kept: matches the wipe's keep selector (model=ST16000*)", Kept: true},
	}}
	require.NoError(t, f.st.Create(ctx, ms))

	code, body, _ = f.get(t, path)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `id="install-disk">nvme0n1 (960 GB`)
	assert.Contains(t, body, `id="wipe-scope">all-except, keeping <span class="mono">model=ST16000*</span>`)
	assert.Contains(t, body, `<tr class="kept"><td>sda</td><td>kept</td>`)
	assert.Contains(t, body, `<td>md</td><td>host:data</td><td class="mono">a1a20001-0203</td><td>nvme1n1p2, sda1</td>`, "the arrays on its disks")
	assert.Contains(t, body, "kept: matches the wipe&#39;s keep selector (model=ST16000*)")
}
