package siderolink

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	pb "github.com/siderolabs/siderolink/api/siderolink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const joinToken = "v2:c2VjcmV0LWpvaW4tdG9rZW4="

// TestRunReprovisions drives Run through a link's life on a clock of its own: provision,
// a live link, a stale one, one that never handshakes, a second endpoint, a lost peer, a
// link that must be made anew, Omni refusing for a while, and the end.
func TestRunReprovisions(t *testing.T) {
	t.Parallel()

	omniKey, err := wgtypes.GeneratePrivateKey()
	require.NoError(t, err)

	nodes := []string{
		"fdae:41e4:649b:9303::a/64", // first provision
		"fdae:41e4:649b:9303::b/64", // after the link went stale: Omni moved the node
		"fdae:41e4:649b:9303::b/64", // after no first handshake: same place
		"fdae:41e4:649b:9303::b/64", // two endpoints
		"fdae:41e4:649b:9303::b/64", // after the peer was lost
	}

	refuse := make(chan bool, 1)
	refuse <- false

	prov := &fakeProvision{answer: func(n int, _ *pb.ProvisionRequest) (*pb.ProvisionResponse, error) {
		r := <-refuse
		refuse <- r

		if r {
			return nil, status.Error(codes.PermissionDenied, "unauthorized")
		}

		if n == 4 {
			return response(omniKey, nodes[3], "127.0.0.1:51820", "127.0.0.2:51820"), nil
		}

		return response(omniKey, nodes[min(n, len(nodes))-1], "127.0.0.1:51820"), nil
	}}
	api := startProvision(t, prov)

	clk := newFakeClock()
	opened := make(chan *fakeTunnel, 10)
	addrs := make(chan netip.Addr, 10)
	core, logs := observer.New(zapcore.DebugLevel)
	macs := []net.HardwareAddr{{0x52, 0x54, 0, 0x12, 0x34, 0x56}}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() {
		done <- Run(ctx, Options{
			API: api, Insecure: true, JoinToken: joinToken, UUID: "4c4c4544-0000-1000-8000-000000000001",
			MACs: func() []net.HardwareAddr { return macs }, TalosVersion: "v1.13.9",
			OnAddress: func(a netip.Addr) { addrs <- a }, Logger: zap.New(core),
			open: fakeOpener(opened), clock: clk,
		})
	}()

	// 1. Provisioned and configured as Talos configures: Omni's key and endpoint, its
	// address alone allowed, the node's prefix on the link.
	tun := recv(t, opened, "the link")
	assert.Equal(t, mustAddr("fdae:41e4:649b:9303::a"), recv(t, addrs, "the first address"))

	cfg := tun.last()
	assert.Equal(t, omniKey.PublicKey(), cfg.PeerKey)
	assert.Equal(t, netip.MustParseAddrPort("127.0.0.1:51820"), cfg.Endpoint)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("fdae:41e4:649b:9303::1/128")}, cfg.AllowedIPs)
	assert.Equal(t, netip.MustParsePrefix(nodes[0]), cfg.Address)

	reqs := prov.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, "4c4c4544-0000-1000-8000-000000000001", reqs[0].GetNodeUuid())
	assert.Equal(t, cfg.PrivateKey.PublicKey().String(), reqs[0].GetNodePublicKey())
	assert.Equal(t, joinToken, reqs[0].GetJoinToken())
	assert.Equal(t, "v1.13.9", reqs[0].GetTalosVersion())
	assert.False(t, reqs[0].GetWireguardOverGrpc())

	var unique struct{ Fingerprint, Token string }
	require.NoError(t, json.Unmarshal([]byte(reqs[0].GetNodeUniqueToken()), &unique))
	assert.Equal(t, Fingerprint(macs), unique.Fingerprint)

	// 2. A live link: a handshake now, checks every 30 s; nothing happens for 275 s.
	tun.set(func(f *fakeTunnel) { f.handshake = clk.Now() })

	for range 9 { // 270 s
		clk.waitSleeping(t)
		clk.Advance(DefaultCheckEvery)
	}

	clk.waitSleeping(t)
	assert.Len(t, prov.requests(), 1, "a live link is left alone")

	// 3. At 300 s without a handshake the link is stale: with its one endpoint tried,
	// Provision again; Omni moved the node, and OnAddress hears of it.
	clk.Advance(DefaultCheckEvery)
	assert.Equal(t, mustAddr("fdae:41e4:649b:9303::b"), recv(t, addrs, "the moved address"))
	assert.Len(t, prov.requests(), 2)
	assert.Equal(t, netip.MustParsePrefix(nodes[1]), tun.last().Address)

	// 4. No handshake on the new configuration: 90 s of grace, then Provision again (the
	// address stays, so OnAddress hears nothing).
	for range 3 { // 90 s
		clk.waitSleeping(t)
		clk.Advance(DefaultCheckEvery)
	}

	clk.waitSleeping(t)
	assert.Len(t, prov.requests(), 2, "within the first handshake's grace")

	clk.Advance(DefaultCheckEvery)
	clk.waitSleeping(t)
	assert.Len(t, prov.requests(), 3)

	// 5. Two endpoints (the fourth response, after another 120 s without a handshake):
	// the first, then on a stale link the second, without a Provision in between, as
	// Talos rotates them.
	for range 4 {
		clk.Advance(DefaultCheckEvery)
		clk.waitSleeping(t)
	}

	assert.Len(t, prov.requests(), 4)
	assert.Equal(t, netip.MustParseAddrPort("127.0.0.1:51820"), tun.last().Endpoint)

	for range 4 {
		clk.Advance(DefaultCheckEvery)
		clk.waitSleeping(t)
	}

	assert.Equal(t, netip.MustParseAddrPort("127.0.0.2:51820"), tun.last().Endpoint)
	assert.Len(t, prov.requests(), 4)

	// 6. The peer is gone from the link: Provision again at the next check.
	tun.set(func(f *fakeTunnel) { f.gone = true })
	clk.Advance(DefaultCheckEvery)
	clk.waitSleeping(t)
	assert.Len(t, prov.requests(), 5)

	// 7. A configuration the link refuses: it is closed and another is made.
	tun.set(func(f *fakeTunnel) { f.gone, f.configureErr = true, errors.New("link vanished") })
	clk.Advance(DefaultCheckEvery)

	second := recv(t, opened, "the link made anew")
	assert.True(t, tun.closed)
	assert.Equal(t, netip.MustParsePrefix(nodes[4]), second.last().Address)
	clk.waitSleeping(t)
	assert.Len(t, prov.requests(), 6)

	// 8. Omni refuses: retries 1 s, 2 s, 4 s apart; then it accepts.
	<-refuse
	refuse <- true

	second.set(func(f *fakeTunnel) { f.gone = true })
	clk.Advance(DefaultCheckEvery)

	for i, wait := range []time.Duration{time.Second, 2 * time.Second} {
		clk.waitSleeping(t)
		assert.Len(t, prov.requests(), 7+i)
		clk.Advance(wait - time.Millisecond)
		clk.waitSleeping(t)
		assert.Len(t, prov.requests(), 7+i, "not before the backoff")
		clk.Advance(time.Millisecond)
	}

	clk.waitSleeping(t)
	assert.Len(t, prov.requests(), 9)

	<-refuse
	refuse <- false

	clk.Advance(4 * time.Second)
	clk.waitSleeping(t)
	assert.Len(t, prov.requests(), 10)
	second.set(func(f *fakeTunnel) { assert.Len(t, f.configs, 2) })

	// Every request presented the same unique token and a key of its own; the link runs
	// on the key of the last.
	keys := map[string]bool{}

	for _, r := range prov.requests() {
		assert.Equal(t, reqs[0].GetNodeUniqueToken(), r.GetNodeUniqueToken())
		keys[r.GetNodePublicKey()] = true
	}

	assert.Len(t, keys, len(prov.requests()), "a key per Provision")
	second.set(func(f *fakeTunnel) {
		assert.Equal(t, prov.requests()[9].GetNodePublicKey(), f.configs[len(f.configs)-1].PrivateKey.PublicKey().String())
	})

	// 9. The end: the link removed, the address withdrawn.
	cancel()
	require.NoError(t, recv(t, done, "Run's return"))
	assert.True(t, second.closed)
	assert.Equal(t, netip.Addr{}, recv(t, addrs, "the address withdrawn"))

	// No secret in any log line: join token, private key (either encoding), unique token.
	secrets := []string{joinToken, cfg.PrivateKey.String(), hex.EncodeToString(cfg.PrivateKey[:]), unique.Token}

	for _, e := range logs.All() {
		// Every field, whatever its kind (strings, errors, stringers, slices, objects).
		line := e.Message + " " + fmt.Sprint(e.ContextMap())

		for _, s := range secrets {
			assert.NotContains(t, line, s)
		}
	}

	assert.NotEmpty(t, logs.FilterMessage("SideroLink is down; reconnecting").All())
}

// TestRunReprovisionsWhenOmniGoes: a send on Reprovision makes Run provision again at
// once, on a live link, with a key of its own; a send from before the configuration
// counts for nothing.
func TestRunReprovisionsWhenOmniGoes(t *testing.T) {
	t.Parallel()

	omniKey, err := wgtypes.GeneratePrivateKey()
	require.NoError(t, err)

	prov := &fakeProvision{answer: func(int, *pb.ProvisionRequest) (*pb.ProvisionResponse, error) {
		return response(omniKey, "fdae:41e4:649b:9303::a/64", "127.0.0.1:51820"), nil
	}}
	api := startProvision(t, prov)

	clk := newFakeClock()
	opened := make(chan *fakeTunnel, 1)
	reprovision := make(chan struct{}, 1)
	reprovision <- struct{}{} // before the link exists: no news

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	go func() {
		_ = Run(ctx, Options{
			API: api, Insecure: true, JoinToken: joinToken, UUID: "4c4c4544-0000-1000-8000-000000000001",
			MACs: func() []net.HardwareAddr { return []net.HardwareAddr{{0x52, 0x54, 0, 0x12, 0x34, 0x56}} }, TalosVersion: "v1.13.9",
			Reprovision: reprovision, open: fakeOpener(opened), clock: clk,
		})
	}()

	tun := recv(t, opened, "the link")
	tun.set(func(f *fakeTunnel) { f.handshake = clk.Now() })
	clk.waitSleeping(t)
	assert.Never(t, func() bool { return len(prov.requests()) > 1 }, 300*time.Millisecond, 10*time.Millisecond,
		"the send from before the link counted for nothing")

	reprovision <- struct{}{}

	require.Eventually(t, func() bool { return len(prov.requests()) == 2 }, 10*time.Second, time.Millisecond, "no Provision after the send")

	var configs []tunnelConfig

	require.Eventually(t, func() bool {
		tun.set(func(f *fakeTunnel) { configs = append([]tunnelConfig(nil), f.configs...) })

		return len(configs) == 2
	}, 10*time.Second, time.Millisecond, "the link was not configured again")

	reqs := prov.requests()
	assert.NotEqual(t, reqs[0].GetNodePublicKey(), reqs[1].GetNodePublicKey(), "a key of its own")
	assert.Equal(t, reqs[1].GetNodePublicKey(), configs[1].PrivateKey.PublicKey().String())
	assert.Equal(t, configs[0].Address, configs[1].Address)
}

func TestStale(t *testing.T) {
	t.Parallel()

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first, after := 90*time.Second, 275*time.Second

	for _, tc := range []struct {
		name      string
		now, last time.Time
		stale     string
	}{
		{name: "new, no handshake yet", now: t0.Add(90 * time.Second)},
		{name: "new, no handshake in time", now: t0.Add(91 * time.Second), stale: "no handshake in the 1m31s since the link was configured"},
		{name: "handshake before configuring is none", now: t0.Add(91 * time.Second), last: t0.Add(-time.Second), stale: "since the link was configured"},
		{name: "live", now: t0.Add(10 * time.Minute), last: t0.Add(10*time.Minute - 275*time.Second)},
		{name: "live at configuring", now: t0.Add(275 * time.Second), last: t0},
		{name: "stale", now: t0.Add(10 * time.Minute), last: t0.Add(10*time.Minute - 276*time.Second), stale: "no handshake for 4m36s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			err := stale(tc.now, t0, tc.last, first, after)
			if tc.stale == "" {
				assert.NoError(t, err)

				return
			}

			assert.ErrorContains(t, err, tc.stale)
		})
	}
}

func TestCheckResponse(t *testing.T) {
	t.Parallel()

	key, err := wgtypes.GeneratePrivateKey()
	require.NoError(t, err)

	good := func() *pb.ProvisionResponse {
		return response(key, "fdae::a/64", "[2001:db8::1]:51820", "omni.example:51820")
	}

	p, err := checkResponse(good())
	require.NoError(t, err)
	assert.Equal(t, provisioned{
		serverKey: key.PublicKey(), serverAddress: mustAddr("fdae:41e4:649b:9303::1"), nodePrefix: netip.MustParsePrefix("fdae::a/64"),
		endpoints: []string{"[2001:db8::1]:51820", "omni.example:51820"},
	}, p)

	for _, tc := range []struct {
		name   string
		change func(*pb.ProvisionResponse)
		err    string
	}{
		{name: "grpc tunnel", change: func(r *pb.ProvisionResponse) { r.GrpcPeerAddrPort = "[fdae::2]:50888" }, err: "WireGuard over gRPC"},
		{name: "key", change: func(r *pb.ProvisionResponse) { r.ServerPublicKey = "nope" }, err: "server public key"},
		{name: "server address", change: func(r *pb.ProvisionResponse) { r.ServerAddress = "" }, err: "server address"},
		{name: "node address", change: func(r *pb.ProvisionResponse) { r.NodeAddressPrefix = "fdae::a" }, err: "node address"},
		{name: "no endpoint", change: func(r *pb.ProvisionResponse) { r.ServerEndpoint = nil }, err: "no endpoint"},
		{name: "endpoint without port", change: func(r *pb.ProvisionResponse) { r.ServerEndpoint = []string{"omni.example"} }, err: "endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			r := good()
			tc.change(r)

			_, err := checkResponse(r)
			assert.ErrorContains(t, err, tc.err)
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"127.0.0.1:51820":        "127.0.0.1:51820",
		"[::ffff:10.5.0.1]:1":    "10.5.0.1:1",
		"[2001:db8::1]:51820":    "[2001:db8::1]:51820",
		"localhost:51820":        "",
		"nohost":                 "error",
		"127.0.0.1:port":         "error",
		"name.invalid.:51820":    "error",
		"[2001:db8::1]:99999999": "error",
	} {
		got, err := resolve(t.Context(), in)

		switch want {
		case "error":
			assert.Error(t, err, in)
		case "":
			if err == nil { // a resolver may be missing here: then the error is the answer
				assert.True(t, got.Addr().IsLoopback(), in)
			}
		default:
			require.NoError(t, err, in)
			assert.Equal(t, want, got.String(), in)
		}
	}
}

func TestOptionsNeeded(t *testing.T) {
	t.Parallel()

	err := Run(t.Context(), Options{JoinToken: "s3cret"})
	require.Error(t, err)

	for _, want := range []string{"Provision API", "UUID", "Talos version", "unique token or the MACs"} {
		assert.ErrorContains(t, err, want)
	}

	assert.NotContains(t, err.Error(), "s3cret")
}

func TestUAPIConfig(t *testing.T) {
	t.Parallel()

	var k, p wgtypes.Key
	k[0], p[31] = 0xab, 0xcd

	got := uapiConfig(tunnelConfig{
		PrivateKey: k, PeerKey: p, Endpoint: netip.MustParseAddrPort("[2001:db8::1]:51820"),
		AllowedIPs: []netip.Prefix{netip.MustParsePrefix("fdae::1/128")},
	})

	assert.Equal(t, "private_key=ab"+strings.Repeat("0", 62)+"\nreplace_peers=true\npublic_key="+strings.Repeat("0", 62)+"cd\n"+
		"endpoint=[2001:db8::1]:51820\npersistent_keepalive_interval=25\nreplace_allowed_ips=true\nallowed_ip=fdae::1/128\n", got)
}

func TestLastHandshakeDump(t *testing.T) {
	t.Parallel()

	var mine, other wgtypes.Key
	mine[0], other[0] = 1, 2

	dump := func(sec string) string {
		return "private_key=" + strings.Repeat("9", 64) + "\nlisten_port=4242\n" +
			"public_key=" + hex.EncodeToString(other[:]) + "\nlast_handshake_time_sec=111\nlast_handshake_time_nsec=0\n" +
			"public_key=" + hex.EncodeToString(mine[:]) + "\nprotocol_version=1\nlast_handshake_time_sec=" + sec + "\nlast_handshake_time_nsec=500\nallowed_ip=fdae::1/128\n"
	}

	got, err := lastHandshake(dump("1767225600"), mine)
	require.NoError(t, err)
	assert.Equal(t, time.Unix(1767225600, 500), got)

	got, err = lastHandshake(strings.ReplaceAll(dump("0"), "nsec=500", "nsec=0"), mine)
	require.NoError(t, err)
	assert.True(t, got.IsZero(), "never")

	var absent wgtypes.Key

	_, err = lastHandshake(dump("1"), absent)
	require.ErrorIs(t, err, errPeerGone)

	_, err = lastHandshake(dump("x"), mine)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), strings.Repeat("9", 64), "the private key stays out of errors")
}
