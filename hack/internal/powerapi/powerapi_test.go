package powerapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/hack/internal/powerapi"
)

type fakeMachine struct {
	running, netOnce bool
	calls            []string
}

func (m *fakeMachine) Running() bool { return m.running }

func (m *fakeMachine) Start(context.Context) error {
	m.calls = append(m.calls, "start")
	m.running = true

	return nil
}

func (m *fakeMachine) Stop(context.Context) error {
	m.calls = append(m.calls, "stop")
	m.running = false

	return nil
}

func (m *fakeMachine) Reset(context.Context) error {
	m.calls = append(m.calls, "reset")

	return nil
}

func (m *fakeMachine) SetNextBootNetwork(on bool) error {
	m.netOnce = on

	return nil
}

const uuid = "4c4c4544-0000-1000-8000-000000000001"

func TestHandler(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name         string
		running      bool
		method, path string
		body         string
		code         int
		reply, calls string
		netOnce      bool
	}{
		{name: "state off", method: "GET", path: "/machines/" + uuid + "/power", code: 200, reply: `{"state":"off"}`},
		{name: "state on", running: true, method: "GET", path: "/machines/" + uuid + "/power", code: 200, reply: `{"state":"on"}`},
		{name: "on", method: "POST", path: "/machines/" + uuid + "/power", body: `{"action":"on"}`, code: 204, calls: "start"},
		{name: "on when on", running: true, method: "POST", path: "/machines/" + uuid + "/power", body: `{"action":"on"}`, code: 204},
		{name: "off", running: true, method: "POST", path: "/machines/" + uuid + "/power", body: `{"action":"off"}`, code: 204, calls: "stop"},
		{name: "cycle running", running: true, method: "POST", path: "/machines/" + uuid + "/power", body: `{"action":"cycle"}`, code: 204, calls: "reset"},
		{name: "cycle off", method: "POST", path: "/machines/" + uuid + "/power", body: `{"action":"cycle"}`, code: 204, calls: "start"},
		{name: "pxe once", method: "POST", path: "/machines/" + uuid + "/boot", body: `{"device":"network","once":true,"mode":"uefi"}`, code: 204, netOnce: true},
		{name: "unknown action", method: "POST", path: "/machines/" + uuid + "/power", body: `{"action":"explode"}`, code: 400, reply: "not one of on, off, cycle"},
		{name: "bad json", method: "POST", path: "/machines/" + uuid + "/power", body: `{"action":`, code: 400, reply: "not valid JSON"},
		{name: "unknown field", method: "POST", path: "/machines/" + uuid + "/power", body: `{"action":"on","force":1}`, code: 400, reply: "unknown field"},
		{name: "empty body", method: "POST", path: "/machines/" + uuid + "/power", code: 400, reply: "the body is empty"},
		{name: "persistent boot", method: "POST", path: "/machines/" + uuid + "/boot", body: `{"device":"network"}`, code: 400, reply: "one-time"},
		{name: "disk boot", method: "POST", path: "/machines/" + uuid + "/boot", body: `{"device":"disk","once":true}`, code: 400, reply: "only network"},
		{name: "unknown machine", method: "GET", path: "/machines/nope/power", code: 404, reply: `no machine \"nope\"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			m := &fakeMachine{running: tc.running}
			h := powerapi.Handler(func(id string) (powerapi.Machine, bool) { return m, id == uuid }, zap.NewNop())

			req := httptest.NewRequestWithContext(t.Context(), tc.method, tc.path, strings.NewReader(tc.body))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)

			resp := rec.Result()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)

			assert.Equal(t, tc.code, resp.StatusCode, "%s", body)
			assert.Contains(t, string(body), tc.reply)
			assert.Equal(t, tc.calls, strings.Join(m.calls, ","))
			assert.Equal(t, tc.netOnce, m.netOnce)

			if resp.StatusCode != http.StatusNoContent {
				assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			}
		})
	}
}
