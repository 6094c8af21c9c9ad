package transitions_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

func TestSetBMC(t *testing.T) {
	t.Parallel()

	const unknown = "4c4c4544-0000-1000-8000-00000000beef" // not booted yet: allowed

	for _, tc := range []struct {
		name string
		id   string
		req  transitions.BMC
		code transitions.Code
		want string // the endpoint answered
	}{
		{"ipmi", machineID, transitions.BMC{Backend: power.BackendIPMI, Address: "10.0.0.5", Port: 623, Username: "admin", Password: "s3cret-bmc"}, notRefused, "ipmi://admin@10.0.0.5:623"},
		{"redfish insecure", machineID, transitions.BMC{Backend: power.BackendRedfish, Address: "bmc-1.example", Username: "root", Password: "s3cret-bmc", Insecure: true}, notRefused, "redfish://root@bmc-1.example"},
		{"api", unknown, transitions.BMC{Backend: power.BackendAPI, Address: "http://10.77.0.1:8090"}, notRefused, "api://http://10.77.0.1:8090"},
		{"redfish URL", machineID, transitions.BMC{Backend: power.BackendRedfish, Address: "http://10.77.0.1:8000"}, notRefused, "redfish://http://10.77.0.1:8000"},
		{"redfish URL with a path", machineID, transitions.BMC{Backend: power.BackendRedfish, Address: "https://bmc/redfish/v1"}, transitions.CodeInvalid, ""},
		{"ipmi URL", machineID, transitions.BMC{Backend: power.BackendIPMI, Address: "http://10.0.0.5"}, transitions.CodeInvalid, ""},
		{"ipv6", machineID, transitions.BMC{Backend: power.BackendIPMI, Address: "fd00::5"}, notRefused, "ipmi://fd00::5"},
		{"none", machineID, transitions.BMC{Backend: power.BackendNone}, notRefused, "none://"},
		{"unknown kind", machineID, transitions.BMC{Backend: power.Backend("telnet"), Address: "x"}, transitions.CodeInvalid, ""},
		{"no address", machineID, transitions.BMC{Backend: power.BackendIPMI}, transitions.CodeInvalid, ""},
		{"port in address", machineID, transitions.BMC{Backend: power.BackendIPMI, Address: "10.0.0.5:623"}, transitions.CodeInvalid, ""},
		{"port out of range", machineID, transitions.BMC{Backend: power.BackendIPMI, Address: "10.0.0.5", Port: 70000}, transitions.CodeInvalid, ""},
		{"api not a URL", machineID, transitions.BMC{Backend: power.BackendAPI, Address: "10.77.0.1:8090"}, transitions.CodeInvalid, ""},
		{"no machine id", "", transitions.BMC{Backend: power.BackendIPMI, Address: "10.0.0.5"}, transitions.CodeInvalid, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ctx := t.Context()
			st := openState(t)
			core, logs := observer.New(zap.DebugLevel)
			tr := transitions.New(st, transitions.Options{Recorder: &fakeRecorder{}, Logger: zap.New(core)})

			ep, err := tr.SetBMC(ctx, tc.id, tc.req)
			require.Equal(t, tc.code, codeOf(err), "%v", err)

			for _, e := range logs.All() {
				assert.NotContains(t, e.Message+fmt.Sprint(e.ContextMap()), "s3cret", "the password is never logged")
			}

			if tc.code != notRefused {
				assert.NotContains(t, err.Error(), "s3cret")

				_, err := safe.StateGetByID[*resources.BMCConfig](ctx, st, tc.id)
				assert.True(t, tc.id == "" || state.IsNotFoundError(err), "nothing stored")

				return
			}

			assert.Equal(t, tc.want, ep.String())
			assert.Empty(t, ep.Password, "the endpoint answered has no password")

			cfg, err := safe.StateGetByID[*resources.BMCConfig](ctx, st, tc.id)
			require.NoError(t, err)
			assert.Equal(t, string(tc.req.Backend), cfg.TypedSpec().Kind)
			assert.Equal(t, resources.BMCSourceUser, cfg.TypedSpec().Source)
			assert.Equal(t, tc.req.Password != "", cfg.TypedSpec().HasPassword)

			secret, err := safe.StateGetByID[*resources.BMCSecret](ctx, st, tc.id)
			require.NoError(t, err)
			assert.Equal(t, tc.req.Password, secret.TypedSpec().Password)

			// Removing it removes both.
			require.NoError(t, tr.RemoveBMC(ctx, tc.id))

			_, err = safe.StateGetByID[*resources.BMCConfig](ctx, st, tc.id)
			assert.True(t, state.IsNotFoundError(err))
			_, err = safe.StateGetByID[*resources.BMCSecret](ctx, st, tc.id)
			assert.True(t, state.IsNotFoundError(err))
		})
	}
}

func TestStoreAgentBMC(t *testing.T) {
	t.Parallel()

	agent := transitions.AgentBMC{Address: "192.0.2.9", Port: 623, User: "anvil", Password: "agent-pw"}

	for _, tc := range []struct {
		name       string
		user       *transitions.BMC // set first, by a user
		stored     bool
		want       resources.BMCConfigSpec
		wantSecret string
	}{
		{"nothing given", nil, true, resources.BMCConfigSpec{Kind: "ipmi", Address: "192.0.2.9", Port: 623, Username: "anvil", Source: resources.BMCSourceAgent, HasPassword: true}, "agent-pw"},
		{"address given", &transitions.BMC{Backend: power.BackendIPMI, Address: "10.77.0.1", Port: 62300}, true,
			resources.BMCConfigSpec{Kind: "ipmi", Address: "10.77.0.1", Port: 62300, Username: "anvil", Source: resources.BMCSourceAgent, HasPassword: true}, "agent-pw"},
		{"credentials given", &transitions.BMC{Backend: power.BackendIPMI, Address: "10.77.0.1", Username: "admin", Password: "user-pw"}, false,
			resources.BMCConfigSpec{Kind: "ipmi", Address: "10.77.0.1", Username: "admin", Source: resources.BMCSourceUser, HasPassword: true}, "user-pw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ctx := t.Context()
			st := openState(t)

			if tc.user != nil {
				_, err := transitions.New(st, transitions.Options{}).SetBMC(ctx, machineID, *tc.user)
				require.NoError(t, err)
			}

			stored, err := transitions.New(st, transitions.Options{}).StoreAgentBMC(ctx, machineID, agent)
			require.NoError(t, err)
			assert.Equal(t, tc.stored, stored)

			cfg, err := safe.StateGetByID[*resources.BMCConfig](ctx, st, machineID)
			require.NoError(t, err)

			got := cfg.TypedSpec().DeepCopy()
			got.UpdatedAt = time.Time{}
			assert.Equal(t, tc.want, got)

			secret, err := safe.StateGetByID[*resources.BMCSecret](ctx, st, machineID)
			require.NoError(t, err)
			assert.Equal(t, tc.wantSecret, secret.TypedSpec().Password)
		})
	}
}
