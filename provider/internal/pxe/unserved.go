package pxe

import (
	"errors"
	"net"
	"sync"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/untrusted"
)

// maxUnservedRemembered bounds the machines unservedLog remembers: a flood of made-up
// MAC addresses must not grow the provider's memory. Past it, the set starts over, so a
// machine may be logged again — never lost, never unbounded.
const maxUnservedRemembered = 4096

// maxClientID bounds what of a client's hardware address (over DHCPv6, its DUID's bytes,
// as long as the datagram that carried them) unservedLog remembers: a DUID is at most
// 130 bytes (RFC 8415: a 2-byte type and 128 bytes), so that real clients stay apart,
// and 4096 remembered cost at most half a megabyte.
const maxClientID = 130

// unservedLog tells the operator, once per machine and reason, that a boot client asked
// and could not be served: an arm64 server with no arm64 boot file configured, an
// architecture Anvil does not boot. Silence is what such an operator saw before.
type unservedLog struct {
	logger *zap.Logger

	mu   sync.Mutex
	seen map[unservedKey]struct{}
}

type unservedKey struct {
	mac    string
	reason string
}

func newUnservedLog(logger *zap.Logger) *unservedLog {
	return &unservedLog{logger: logger, seen: map[unservedKey]struct{}{}}
}

// note logs err for the client at mac when err says the client cannot be served and this
// machine was not logged for it yet; it reports whether it logged. Other errors are
// ignored (the caller counts them).
func (u *unservedLog) note(mac net.HardwareAddr, arch ClientArch, vendorClass []byte, err error) bool {
	why := unservedReason(err)
	if why == "" {
		return false
	}

	key := unservedKey{mac: string(mac[:min(len(mac), maxClientID)]), reason: why}

	u.mu.Lock()

	_, seen := u.seen[key]
	if !seen {
		if len(u.seen) >= maxUnservedRemembered {
			clear(u.seen)
		}

		u.seen[key] = struct{}{}
	}

	u.mu.Unlock()

	if seen {
		return false
	}

	fields := []zap.Field{untrusted.HardwareAddr("mac", mac), zap.String("reason", why)}
	if !errors.Is(err, errNoArch) {
		fields = append(fields, zap.Uint16("client_arch", uint16(arch.Code)))
	}

	if len(vendorClass) > 0 {
		fields = append(fields, zap.ByteString("vendor_class", printable(vendorClass)))
	}

	u.logger.Warn("boot client not served", fields...)

	return true
}

// printable keeps a client-sent string fit for a log line: at most 64 bytes, anything
// outside printable ASCII replaced by '?'.
func printable(b []byte) []byte {
	b = b[:min(len(b), 64)]
	out := make([]byte, len(b))

	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}

		out[i] = c
	}

	return out
}
