package siderolink_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"testing"

	"github.com/siderolabs/omni/client/pkg/jointoken"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/siderolink"
)

func mac(t *testing.T, s string) net.HardwareAddr {
	t.Helper()

	m, err := net.ParseMAC(s)
	require.NoError(t, err)

	return m
}

// TestFingerprint: the hex SHA-256 of the raw MAC bytes, sorted, whatever order the
// links came in — the same machine gives the same fingerprint boot after boot.
func TestFingerprint(t *testing.T) {
	t.Parallel()

	a, b := mac(t, "52:54:00:12:34:56"), mac(t, "0c:c4:7a:00:00:01")

	// Written out: b sorts before a (0x0c < 0x52).
	raw := append(append([]byte{}, b...), a...)
	sum := sha256.Sum256(raw)
	want := hex.EncodeToString(sum[:])

	assert.Equal(t, want, siderolink.Fingerprint([]net.HardwareAddr{a, b}))
	assert.Equal(t, want, siderolink.Fingerprint([]net.HardwareAddr{b, a}))

	// No NICs at all is still a fingerprint: that of nothing, as Omni computes it.
	empty := sha256.Sum256(nil)
	assert.Equal(t, hex.EncodeToString(empty[:]), siderolink.Fingerprint(nil))
}

// TestNodeUniqueToken: the JSON Omni's jointoken.NodeUniqueToken.Encode writes, field
// names and order included, which Omni parses back with ParseNodeUniqueToken.
func TestNodeUniqueToken(t *testing.T) {
	t.Parallel()

	macs := []net.HardwareAddr{mac(t, "52:54:00:12:34:56")}

	tok, err := siderolink.NodeUniqueToken(macs, "8d7ba1b4-5e6a-4d25-9c3e-6a4c4cfb4a01")
	require.NoError(t, err)
	assert.Equal(t, `{"Fingerprint":"`+siderolink.Fingerprint(macs)+`","Token":"8d7ba1b4-5e6a-4d25-9c3e-6a4c4cfb4a01"}`, tok)

	fresh, err := siderolink.NewUniqueToken(macs)
	require.NoError(t, err)

	var parsed struct{ Fingerprint, Token string }
	require.NoError(t, json.Unmarshal([]byte(fresh), &parsed))
	assert.Equal(t, siderolink.Fingerprint(macs), parsed.Fingerprint)
	assert.Len(t, parsed.Token, 36, "a UUID")

	again, err := siderolink.NewUniqueToken(macs)
	require.NoError(t, err)
	assert.NotEqual(t, fresh, again, "the random part is random")

	// Omni's own package encodes the same token and reads ours back (the package is
	// Omni's, used here only: the agent does without its Talos client dependencies).
	omni, err := jointoken.NewNodeUniqueToken(siderolink.Fingerprint(macs), "8d7ba1b4-5e6a-4d25-9c3e-6a4c4cfb4a01").Encode()
	require.NoError(t, err)
	assert.Equal(t, omni, tok)

	back, err := jointoken.ParseNodeUniqueToken(fresh)
	require.NoError(t, err)
	assert.Equal(t, parsed.Fingerprint, back.Fingerprint)
	assert.Equal(t, parsed.Token, back.Token)
}

func TestLinkMACs(t *testing.T) {
	t.Parallel()

	link := func(id string, physical bool, hw, perm string) *network.LinkStatus {
		l := network.NewLinkStatus(network.NamespaceName, id)
		l.TypedSpec().Type = nethelpers.LinkEther

		if !physical {
			l.TypedSpec().Kind = "bridge"
		}

		if hw != "" {
			l.TypedSpec().HardwareAddr = nethelpers.HardwareAddr(mac(t, hw))
		}

		if perm != "" {
			l.TypedSpec().PermanentAddr = nethelpers.HardwareAddr(mac(t, perm))
		}

		return l
	}

	got := siderolink.LinkMACs([]*network.LinkStatus{
		link("eth0", true, "02:00:00:00:00:01", ""),
		link("eth1", true, "02:00:00:00:00:99", "0c:c4:7a:00:00:02"), // bonded: the permanent one counts
		link("br0", false, "02:00:00:00:00:03", ""),
		link("eth2", true, "", ""),
	})

	assert.Equal(t, []net.HardwareAddr{mac(t, "02:00:00:00:00:01"), mac(t, "0c:c4:7a:00:00:02")}, got)
}
