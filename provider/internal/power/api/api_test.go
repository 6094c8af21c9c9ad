package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/internal/powerwire"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/power/api"
)

const uuid = "4c4c4544-0000-1000-8000-000000000001"

// fakeAPI is a power API with one machine, recording what it was asked.
type fakeAPI struct {
	mu       sync.Mutex
	on       bool
	netOnce  bool
	mode     string
	requests []string
}

func (f *fakeAPI) handler(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /machines/"+uuid+"/power", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()

		state := "off"
		if f.on {
			state = "on"
		}

		json.NewEncoder(w).Encode(powerwire.PowerReply{State: state}) //nolint:errcheck // the client went away: nothing to do
	})
	mux.HandleFunc("POST /machines/"+uuid+"/power", func(w http.ResponseWriter, r *http.Request) {
		var req powerwire.PowerRequest
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))

		f.mu.Lock()
		defer f.mu.Unlock()

		f.requests = append(f.requests, req.Action)

		switch req.Action {
		case powerwire.ActionOn, powerwire.ActionCycle:
			f.on = true
		case powerwire.ActionOff:
			f.on = false
		}

		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /machines/"+uuid+"/boot", func(w http.ResponseWriter, r *http.Request) {
		var req powerwire.BootRequest
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))

		f.mu.Lock()
		defer f.mu.Unlock()

		f.netOnce, f.mode = req.Device == "network" && req.Once, req.Mode
		w.WriteHeader(http.StatusNoContent)
	})

	return mux
}

func dial(t *testing.T, address, user, password string) power.Client {
	t.Helper()

	c, err := api.Dial(t.Context(), power.Endpoint{Backend: power.BackendAPI, Address: address, Username: user, Password: password, MachineUUID: uuid})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	return c
}

func TestClient(t *testing.T) {
	t.Parallel()

	f := &fakeAPI{}
	srv := httptest.NewServer(f.handler(t))
	t.Cleanup(srv.Close)

	ctx := t.Context()
	c := dial(t, srv.URL, "", "")

	st, err := c.PowerState(ctx)
	require.NoError(t, err)
	assert.False(t, st)

	require.NoError(t, c.SetPXEOnce(ctx, power.BootModeUEFI))
	require.NoError(t, c.PowerOn(ctx))

	st, err = c.PowerState(ctx)
	require.NoError(t, err)
	assert.True(t, st)

	require.NoError(t, c.PowerCycle(ctx))
	require.NoError(t, c.PowerOff(ctx))

	f.mu.Lock()
	defer f.mu.Unlock()

	assert.Equal(t, []string{"on", "cycle", "off"}, f.requests)
	assert.True(t, f.netOnce)
	assert.Equal(t, "uefi", f.mode)
	assert.False(t, f.on)
}

func TestClientErrors(t *testing.T) {
	t.Parallel()

	// A listener that accepts and never answers: a BMC that hangs.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { hung.Close() })

	go func() {
		for {
			conn, err := hung.Accept()
			if err != nil {
				return
			}

			go func() { _, _ = io.Copy(io.Discard, conn) }()
		}
	}()

	// A port nothing listens on: bound without listening, so that it refuses connections
	// and no server of this test (bind(0) hands a released port out again) takes it.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	require.NoError(t, unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := unix.Getsockname(fd)
	require.NoError(t, err)
	closedAddr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)

	serve := func(code int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if user, pass, ok := r.BasicAuth(); ok && (user != "admin" || pass != "right-password") {
				w.WriteHeader(http.StatusUnauthorized)

				return
			}

			w.WriteHeader(code)
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)

		return srv.URL
	}

	for _, tc := range []struct {
		name, address, password string
		want                    error
		contains                string
	}{
		{"unreachable", "http://" + closedAddr, "", power.ErrUnreachable, "connection refused"},
		{"hung", "http://" + hung.Addr().String(), "", power.ErrUnreachable, "deadline"},
		{"wrong password", serve(200, `{"state":"on"}`), "wrong-password", power.ErrUnauthorized, "HTTP 401"},
		{"garbage", serve(200, `<html>not json`), "", nil, "not the expected JSON"},
		{"unknown state", serve(200, `{"state":"sideways"}`), "", nil, `unknown power state "sideways"`},
		{"error reply", serve(404, `{"error":"no machine"}`), "", nil, "HTTP 404: no machine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			// Only the hung server must run into the deadline: the others get time for a
			// slow round trip, so their own error shows rather than "deadline".
			timeout := 5 * time.Second
			if tc.name == "hung" {
				timeout = 500 * time.Millisecond
			}

			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()

			user := ""
			if tc.password != "" {
				user = "admin"
			}

			start := time.Now()
			_, err := dial(t, tc.address, user, tc.password).PowerState(ctx)
			require.Error(t, err)
			assert.Less(t, time.Since(start), 5*time.Second, "bounded by the context")

			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			}

			assert.Contains(t, err.Error(), tc.contains)
			assert.NotContains(t, err.Error(), "wrong-password", "the password is never in an error")
		})
	}
}

func TestDialValidates(t *testing.T) {
	t.Parallel()

	for _, ep := range []power.Endpoint{
		{Backend: power.BackendAPI, Address: "10.0.0.1:8090", MachineUUID: uuid},
		{Backend: power.BackendAPI, Address: "ftp://x", MachineUUID: uuid},
		{Backend: power.BackendAPI, Address: "http://10.0.0.1:8090"},
	} {
		_, err := api.Dial(t.Context(), ep)
		assert.Error(t, err, ep.Address)
	}
}
