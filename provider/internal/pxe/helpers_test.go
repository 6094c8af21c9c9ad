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
