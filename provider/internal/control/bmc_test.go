package control_test

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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

func TestSetBMC(t *testing.T) {
	t.Parallel()

	const unknown = "4c4c4544-0000-1000-8000-00000000beef" // not booted yet: allowed

	for _, tc := range []struct {
		name string
		req  *controlv1.SetBMCRequest
		code codes.Code
		want string // the endpoint answered
	}{
		{"ipmi", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "ipmi", Address: "10.0.0.5", Port: 623, Username: "admin", Password: "s3cret-bmc"}, codes.OK, "ipmi://admin@10.0.0.5:623"},
		{"redfish insecure", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "redfish", Address: "bmc-1.example", Username: "root", Password: "s3cret-bmc", Insecure: true}, codes.OK, "redfish://root@bmc-1.example"},
		{"api", &controlv1.SetBMCRequest{MachineId: unknown, Kind: "api", Address: "http://10.77.0.1:8090"}, codes.OK, "api://http://10.77.0.1:8090"},
		{"redfish URL", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "redfish", Address: "http://10.77.0.1:8000"}, codes.OK, "redfish://http://10.77.0.1:8000"},
		{"redfish URL with a path", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "redfish", Address: "https://bmc/redfish/v1"}, codes.InvalidArgument, ""},
		{"ipmi URL", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "ipmi", Address: "http://10.0.0.5"}, codes.InvalidArgument, ""},
		{"ipv6", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "ipmi", Address: "fd00::5"}, codes.OK, "ipmi://fd00::5"},
		{"none", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "none"}, codes.OK, "none://"},
		{"unknown kind", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "telnet", Address: "x"}, codes.InvalidArgument, ""},
		{"no address", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "ipmi"}, codes.InvalidArgument, ""},
		{"port in address", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "ipmi", Address: "10.0.0.5:623"}, codes.InvalidArgument, ""},
		{"port out of range", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "ipmi", Address: "10.0.0.5", Port: 70000}, codes.InvalidArgument, ""},
		{"api not a URL", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "api", Address: "10.77.0.1:8090"}, codes.InvalidArgument, ""},
		{"no machine id", &controlv1.SetBMCRequest{Kind: "ipmi", Address: "10.0.0.5"}, codes.InvalidArgument, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ctx := t.Context()
			st := openState(t)
			core, logs := observer.New(zap.DebugLevel)
			tr := control.NewTransitions(st, &fakeRecorder{}, nil, zap.New(core))

			resp, err := tr.SetBMC(ctx, tc.req)
			require.Equal(t, tc.code, status.Code(err), "%v", err)

			for _, e := range logs.All() {
				assert.NotContains(t, e.Message+fmt.Sprint(e.ContextMap()), "s3cret", "the password is never logged")
			}

			if tc.code != codes.OK {
				assert.NotContains(t, err.Error(), "s3cret")

				_, err := safe.StateGetByID[*resources.BMCConfig](ctx, st, tc.req.GetMachineId())
				assert.True(t, state.IsNotFoundError(err), "nothing stored")

				return
			}

			assert.Equal(t, tc.want, resp.GetEndpoint())

			cfg, err := safe.StateGetByID[*resources.BMCConfig](ctx, st, tc.req.GetMachineId())
			require.NoError(t, err)
			assert.Equal(t, tc.req.GetKind(), cfg.TypedSpec().Kind)
			assert.Equal(t, resources.BMCSourceUser, cfg.TypedSpec().Source)
			assert.Equal(t, tc.req.GetPassword() != "", cfg.TypedSpec().HasPassword)

			secret, err := safe.StateGetByID[*resources.BMCSecret](ctx, st, tc.req.GetMachineId())
			require.NoError(t, err)
			assert.Equal(t, tc.req.GetPassword(), secret.TypedSpec().Password)

			// An empty kind removes both.
			_, err = tr.SetBMC(ctx, &controlv1.SetBMCRequest{MachineId: tc.req.GetMachineId()})
			require.NoError(t, err)

			_, err = safe.StateGetByID[*resources.BMCConfig](ctx, st, tc.req.GetMachineId())
			assert.True(t, state.IsNotFoundError(err))
			_, err = safe.StateGetByID[*resources.BMCSecret](ctx, st, tc.req.GetMachineId())
			assert.True(t, state.IsNotFoundError(err))
		})
	}
}

func TestStoreAgentBMC(t *testing.T) {
	t.Parallel()

	agent := control.AgentBMC{Address: "192.0.2.9", Port: 623, User: "anvil", Password: "agent-pw"}

	for _, tc := range []struct {
		name       string
		user       *controlv1.SetBMCRequest // set first, by a user
		stored     bool
		want       resources.BMCConfigSpec
		wantSecret string
	}{
		{"nothing given", nil, true, resources.BMCConfigSpec{Kind: "ipmi", Address: "192.0.2.9", Port: 623, Username: "anvil", Source: resources.BMCSourceAgent, HasPassword: true}, "agent-pw"},
		{"address given", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "ipmi", Address: "10.77.0.1", Port: 62300}, true,
			resources.BMCConfigSpec{Kind: "ipmi", Address: "10.77.0.1", Port: 62300, Username: "anvil", Source: resources.BMCSourceAgent, HasPassword: true}, "agent-pw"},
		{"credentials given", &controlv1.SetBMCRequest{MachineId: machineID, Kind: "ipmi", Address: "10.77.0.1", Username: "admin", Password: "user-pw"}, false,
			resources.BMCConfigSpec{Kind: "ipmi", Address: "10.77.0.1", Username: "admin", Source: resources.BMCSourceUser, HasPassword: true}, "user-pw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ctx := t.Context()
			st := openState(t)

			if tc.user != nil {
				_, err := control.NewTransitions(st, &fakeRecorder{}, nil, nil).SetBMC(ctx, tc.user)
				require.NoError(t, err)
			}

			stored, err := control.StoreAgentBMC(ctx, st, machineID, agent)
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
