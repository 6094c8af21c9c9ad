package pxe

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"
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

// TestDHCPv6AnswersOnlyWhileServing: the DHCPv6 boot server, like the ProxyDHCP, leaves
// clients unanswered while Serving errs, counted as ignored for "unready".
func TestDHCPv6AnswersOnlyWhileServing(t *testing.T) {
	t.Parallel()

	src := netip.MustParseAddrPort("[fe80::5054:ff:fe12:3456%vs0]:546")

	for _, tc := range []struct {
		name    string
		serving error
	}{
		{name: "serving"},
		{name: "cut off", serving: errors.New("etcd not reached for 7s")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			cfg := testConfig6(t, false, false)
			cfg.Serving = func() error { return tc.serving }

			s := testDHCPv6(cfg, zap.NewNop())

			out, _ := s.handle(request6(t, dhcpv6.MessageTypeSolicit, kindHTTP).ToBytes(), src, false)

			unready := testutilValue(t, s.dhcp.m.ignored.WithLabelValues("dhcpv6", "unready"))

			if tc.serving != nil {
				assert.Nil(t, out, "nothing answered")
				assert.InDelta(t, 1, unready, 0)

				return
			}

			assert.NotNil(t, out, "answered")
			assert.InDelta(t, 0, unready, 0)
		})
	}
}
