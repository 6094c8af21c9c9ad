package pxe

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
)

// TestProxyAnswersOnlyWhileServing: while Serving errs (a replica cut off from the shared
// state) the ProxyDHCP leaves PXE clients unanswered, on both ports, and counts them as
// ignored for "unready": the client takes the offer of a replica that serves. The same
// requests are answered while Serving is nil.
func TestProxyAnswersOnlyWhileServing(t *testing.T) {
	t.Parallel()

	errCutOff := errors.New("etcd not reached for 7s")

	discover := func(t *testing.T) *dhcpv4.DHCPv4 { return pxeRequest(t, dhcpv4.MessageTypeDiscover, 7, withGUID) }
	request := func(t *testing.T) *dhcpv4.DHCPv4 {
		return pxeRequest(t, dhcpv4.MessageTypeRequest, 0, dhcpv4.WithClientIP(net.IPv4(10, 199, 0, 50)))
	}

	for _, tc := range []struct {
		name     string
		serving  error
		bootPort bool
		req      func(t *testing.T) *dhcpv4.DHCPv4
	}{
		{name: "DISCOVER, serving", req: discover},
		{name: "DISCOVER, cut off", serving: errCutOff, req: discover},
		{name: "REQUEST on port 4011, serving", bootPort: true, req: request},
		{name: "REQUEST on port 4011, cut off", serving: errCutOff, bootPort: true, req: request},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			cfg := testConfig(t, false)
			cfg.Serving = func() error { return tc.serving }

			metrics := NewMetrics(nil)
			p := testProxy(*cfg, metrics.dhcp("proxy"), metrics.dhcp("bootserver"))

			c, server := p.dhcp, "proxy"
			if tc.bootPort {
				c, server = p.boot, "bootserver"
			}

			out, to := p.handle(tc.req(t).ToBytes(), netip.MustParseAddrPort("10.199.0.50:68"), tc.bootPort)

			unready := testutilValue(t, metrics.ignored.WithLabelValues(server, "unready"))
			assert.InDelta(t, 1, testutilValue(t, c.received), 0, "received either way")

			if tc.serving != nil {
				assert.Nil(t, out, "nothing answered")
				assert.False(t, to.IsValid())
				assert.InDelta(t, 1, unready, 0)
				assert.InDelta(t, 0, testutilValue(t, c.offer)+testutilValue(t, c.ack), 0)

				return
			}

			assert.NotNil(t, out, "answered")
			assert.True(t, to.IsValid())
			assert.InDelta(t, 0, unready, 0)
			assert.InDelta(t, 1, testutilValue(t, c.offer)+testutilValue(t, c.ack), 0)
		})
	}
}
