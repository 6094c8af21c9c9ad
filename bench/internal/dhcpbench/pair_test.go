package dhcpbench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRcvbufErrors(t *testing.T) {
	t.Parallel()

	snmp := "Ip: Forwarding DefaultTTL\nIp: 1 64\n" +
		"Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n" +
		"Udp: 10 0 3 12 7 0\n" +
		"UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n" +
		"UdpLite: 0 0 0 0 99 0\n"

	v, err := parseRcvbufErrors(snmp)
	require.NoError(t, err)
	assert.Equal(t, int64(7), v, "Udp's, not UdpLite's")

	_, err = parseRcvbufErrors("Ip: Forwarding\nIp: 1\n")
	require.Error(t, err)

	_, err = parseRcvbufErrors("Udp: RcvbufErrors\nUdp: many\n")
	require.Error(t, err)
}
