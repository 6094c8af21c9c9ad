package power_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/power"
)

// recordingDialer answers as a BMC that speaks some protocols, recording what it was
// dialled with.
type recordingDialer struct {
	mu    sync.Mutex
	err   error
	calls []power.Endpoint
}

func (d *recordingDialer) dial(_ context.Context, ep power.Endpoint) (power.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()

	d.calls = append(d.calls, ep)
	if d.err != nil {
		return nil, d.err
	}

	return nopClient{}, nil
}

type nopClient struct{ power.Client }

func TestRedfishFirst(t *testing.T) {
	t.Parallel()

	ep := power.Endpoint{Backend: power.BackendIPMI, Address: "10.0.0.5", Port: 623, Username: "anvil", Password: "pw", MachineUUID: "m1"}
	refused := fmt.Errorf("connection refused: %w", power.ErrUnreachable)

	for _, tc := range []struct {
		name                  string
		always                bool
		redfishErr, ipmiErr   error
		wantErr               error
		wantRedfish, wantIPMI int // calls over two dials
	}{
		{"redfish answers", false, nil, nil, nil, 2, 0},
		{"ipmi only: remembered", false, refused, nil, nil, 1, 2},
		{"always redfish", true, refused, nil, power.ErrUnreachable, 2, 0},
		{"redfish refuses the credentials", false, power.ErrUnauthorized, nil, power.ErrUnauthorized, 2, 0},
		{"neither", false, refused, errors.New("no IPMI either"), power.ErrUnreachable, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			rf, ipmi := &recordingDialer{err: tc.redfishErr}, &recordingDialer{err: tc.ipmiErr}
			p := &power.RedfishFirst{Redfish: rf.dial, IPMI: ipmi.dial, Always: tc.always, Port: 8443, HTTPS: true, Insecure: true}

			for range 2 {
				c, err := p.Dial(t.Context(), ep)
				if tc.wantErr != nil {
					require.ErrorIs(t, err, tc.wantErr)

					continue
				}

				require.NoError(t, err)
				require.NotNil(t, c)
			}

			assert.Len(t, rf.calls, tc.wantRedfish, "redfish dials")
			assert.Len(t, ipmi.calls, tc.wantIPMI, "ipmi dials")

			if len(rf.calls) > 0 {
				got := rf.calls[0]
				assert.Equal(t, power.BackendRedfish, got.Backend)
				assert.Equal(t, "https://10.0.0.5", got.Address)
				assert.Equal(t, 8443, got.Port)
				assert.True(t, got.Insecure)
				assert.Equal(t, "anvil", got.Username)
				assert.Equal(t, "m1", got.MachineUUID)
			}

			if len(ipmi.calls) > 0 {
				assert.Equal(t, ep, ipmi.calls[0], "IPMI gets the endpoint as it is")
			}
		})
	}
}

func TestRedfishFirstIPv6(t *testing.T) {
	t.Parallel()

	rf := &recordingDialer{}
	p := &power.RedfishFirst{Redfish: rf.dial, IPMI: rf.dial}

	_, err := p.Dial(t.Context(), power.Endpoint{Backend: power.BackendIPMI, Address: "fd00::5"})
	require.NoError(t, err)
	assert.Equal(t, "http://[fd00::5]", rf.calls[0].Address)
}
