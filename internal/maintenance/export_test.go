package maintenance

import (
	"crypto/tls"
	"net/netip"
	"time"
)

// The builders of the statuses the package writes, for table tests.
var (
	MachineStatusOf   = machineStatus
	ExtensionStatusOf = extensionStatus
)

// MaintenanceTLS is the server TLS a machine in maintenance serves, for tests that need
// one of their own.
func MaintenanceTLS(addrs []netip.Addr) (*tls.Config, error) {
	cert, err := selfSigned(addrs, time.Now())
	if err != nil {
		return nil, err
	}

	return tlsConfig(cert), nil
}
