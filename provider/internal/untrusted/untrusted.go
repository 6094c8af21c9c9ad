// Package untrusted bounds what a client sent before it goes into a log line: a machine
// ID, a MAC address, a path claimed by whoever is on the provisioning network may be as
// long as the message that carried it (an agent's hello: 4 MiB), and a refusal is logged
// for every one.
package untrusted

import (
	"net"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// MaxLogged is how many bytes of a client's value a log line keeps: a machine ID (a
// UUID, 36 bytes, or "mac-" and 12 hex digits) and a MAC (17 bytes, 59 for the
// longest link-layer address) fit whole, and 64 bytes of anything longer say enough to
// recognise it.
const MaxLogged = 64

// String is a log field of what a client sent: at most MaxLogged bytes of it, then
// "…(N bytes)" when it was longer; control characters and invalid UTF-8 become '?'.
func String(key, value string) zap.Field {
	return zap.String(key, Bounded(value))
}

// Strings is String of each of values, at most MaxLogged of them (then "…(N values)").
func Strings(key string, values []string) zap.Field {
	out := make([]string, 0, min(len(values), MaxLogged)+1)

	for i, v := range values {
		if i == MaxLogged {
			out = append(out, "…("+strconv.Itoa(len(values))+" values)")

			break
		}

		out = append(out, Bounded(v))
	}

	return zap.Strings(key, out)
}

// Bounded is value as String logs it.
func Bounded(value string) string {
	s := value
	if len(s) > MaxLogged {
		s = s[:MaxLogged]
	}

	// A rune cut in two at the bound is invalid UTF-8 too.
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return '?'
		}

		return r
	}, strings.ToValidUTF8(s, "?"))

	if len(value) > MaxLogged {
		s += "…(" + strconv.Itoa(len(value)) + " bytes)"
	}

	return s
}

// MaxHardwareAddr is how many bytes of a hardware address a log line keeps: 20,
// InfiniBand's, the longest link-layer address a DHCP client has (59 characters
// printed). A DHCPv6 client names itself by a DUID of any length.
const MaxHardwareAddr = 20

// HardwareAddr is a log field of a hardware address a client sent: at most
// MaxHardwareAddr bytes of it, then "…(N bytes)" when it was longer.
func HardwareAddr(key string, mac net.HardwareAddr) zap.Field {
	if len(mac) <= MaxHardwareAddr {
		return zap.String(key, mac.String())
	}

	return zap.String(key, mac[:MaxHardwareAddr].String()+"…("+strconv.Itoa(len(mac))+" bytes)")
}
