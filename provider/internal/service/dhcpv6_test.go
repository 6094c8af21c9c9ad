package service

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/pxe"
)

// The DHCPv6 options are checked before anything binds: a wrong mode or prefix is a
// clear error at start.
func TestDHCPv6Options(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name, mode, prefix, iface string
		wantOff                   bool
		wantErr                   string
	}{
		{name: "off by default", mode: "", wantOff: true},
		{name: "off", mode: "off", wantOff: true},
		{name: "unknown mode", mode: "stateful", wantErr: `invalid --dhcpv6-mode "stateful"`},
		{name: "no such interface", mode: "info", iface: "no-such-if0", wantErr: "interface no-such-if0 not found"},
		{name: "loopback has no global IPv6", mode: "info", iface: "lo", wantErr: "has no global IPv6 address"},
		{name: "full without a prefix", mode: "full", iface: "lo", wantErr: "needs --dhcpv6-prefix, an IPv6 /64"},
		{name: "full with a /48", mode: "full", prefix: "fd77::/48", iface: "lo", wantErr: "needs --dhcpv6-prefix, an IPv6 /64"},
		{name: "full with an IPv4 prefix", mode: "full", prefix: "10.0.0.0/24", iface: "lo", wantErr: "needs --dhcpv6-prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			opts := DefaultOptions
			opts.DHCPv6Mode, opts.DHCPv6Prefix, opts.DHCPProxyIfaceOrIP = tc.mode, tc.prefix, tc.iface

			env := &environment{opts: opts, advertise: netip.MustParseAddr("fd77::1"), logger: zap.NewNop()}

			r, err := env.dhcpv6(pxe.NewMetrics(nil))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.wantOff, r == nil)
		})
	}
}
