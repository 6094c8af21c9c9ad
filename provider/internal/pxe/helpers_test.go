package pxe

import (
	"net/netip"

	"go.uber.org/zap"
)

func zapNop() *zap.Logger { return zap.NewNop() }

// The server side of the lab tests' network (netns_lab_test.go), which the unit tests'
// configurations name too.
const testServerIf = "vs0"

var testServerIP = netip.MustParseAddr("10.199.0.1")

// testProxy is a ProxyDHCP on a validated configuration, without sockets.
func testProxy(cfg Config, dhcp, boot *dhcpCounters) *ProxyDHCP {
	return &ProxyDHCP{cfg: cfg, logger: zapNop(), unserved: newUnservedLog(zapNop()), dhcp: dhcp, boot: boot}
}
