package siderolink

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/siderolabs/siderolink/api/siderolink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun/netstack"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

var (
	omniAddr = netip.MustParseAddr("fdae:41e4:649b:9303::1")
	nodeAddr = netip.MustParsePrefix("fdae:41e4:649b:9303:8a2c:1f00:11:2233/64")
)

// fakeOmniPeer is Omni's side of SideroLink: wireguard-go over a netstack holding the
// server address, listening on a loopback UDP port, with a peer for each node Provision
// admits — what Omni's siderolink manager does.
type fakeOmniPeer struct {
	key  wgtypes.Key
	dev  *device.Device
	net  *netstack.Net
	port int
}

func newFakeOmniPeer(t *testing.T) *fakeOmniPeer {
	t.Helper()

	key, err := wgtypes.GeneratePrivateKey()
	require.NoError(t, err)

	tdev, tnet, err := netstack.CreateNetTUN([]netip.Addr{omniAddr}, nil, MTU)
	require.NoError(t, err)

	dev := device.NewDevice(tdev, conn.NewDefaultBind(), deviceLogger(bufferedLogger(t).Named("omni")))
	require.NoError(t, dev.IpcSet(fmt.Sprintf("private_key=%x\nlisten_port=0\n", key[:])))
	require.NoError(t, dev.Up())

	dump, err := dev.IpcGet()
	require.NoError(t, err)

	_, rest, ok := strings.Cut(dump, "listen_port=")
	require.True(t, ok)

	port, err := strconv.Atoi(strings.SplitN(rest, "\n", 2)[0])
	require.NoError(t, err)

	return &fakeOmniPeer{key: key, dev: dev, net: tnet, port: port}
}

// admit adds the node as a peer and answers Provision as Omni does.
func (o *fakeOmniPeer) admit(req *pb.ProvisionRequest) (*pb.ProvisionResponse, error) {
	nodeKey, err := wgtypes.ParseKey(req.GetNodePublicKey())
	if err != nil {
		return nil, err
	}

	if err := o.dev.IpcSet(fmt.Sprintf("public_key=%x\nreplace_allowed_ips=true\nallowed_ip=%s/128\n", nodeKey[:], nodeAddr.Addr())); err != nil {
		return nil, err
	}

	return response(o.key, nodeAddr.String(), "127.0.0.1:"+strconv.Itoa(o.port)), nil
}

// netstackOpener opens the node's link as wireguard-go over a netstack (no TUN device,
// no root), sending each netstack on nets. A netstack keeps the address it was made with:
// a configuration moving it is refused, and Run makes the link anew.
func netstackOpener(nets chan<- *netstack.Net) opener {
	return func(_ context.Context, logger *zap.Logger, cfg tunnelConfig) (tunnel, error) {
		tdev, tnet, err := netstack.CreateNetTUN([]netip.Addr{cfg.Address.Addr()}, nil, MTU)
		if err != nil {
			return nil, err
		}

		made := cfg.Address
		t := newUserspace(tdev, logger, func(p netip.Prefix) error {
			if p != made {
				return fmt.Errorf("a netstack keeps its address %s", made)
			}

			return nil
		}, nil)

		if err := t.Configure(cfg); err != nil {
			t.Close()

			return nil, err
		}

		nets <- tnet

		return t, nil
	}
}

// TestUserspaceThroughTunnel joins a fake Omni over real WireGuard (wireguard-go at both
// ends, netstacks for links): the handshake happens, the node reaches Omni's address
// from its SideroLink address (which is how Omni tells machines apart) and Omni reaches
// the node's port 50000. Then Omni restarts with a new key and port; the node notices the
// handshakes stop, provisions again and is back.
func TestUserspaceThroughTunnel(t *testing.T) {
	t.Parallel()

	var (
		mu   sync.Mutex
		omni = newFakeOmniPeer(t)
	)

	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()

		omni.dev.Close()
	})

	prov := &fakeProvision{answer: func(_ int, req *pb.ProvisionRequest) (*pb.ProvisionResponse, error) {
		mu.Lock()
		defer mu.Unlock()

		return omni.admit(req)
	}}
	api := startProvision(t, prov)

	nets := make(chan *netstack.Net, 10)
	addrs := make(chan netip.Addr, 10)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() {
		done <- Run(ctx, Options{
			API: api, Insecure: true, JoinToken: "v2:test", UUID: "4c4c4544-0000-1000-8000-000000000002", UniqueToken: `{"Fingerprint":"x","Token":"y"}`,
			TalosVersion: "v1.13.9", OnAddress: func(a netip.Addr) { addrs <- a }, Logger: bufferedLogger(t).Named("node"),
			// Short enough for a test, long enough for a loopback handshake.
			StaleAfter: 1500 * time.Millisecond, FirstHandshakeWithin: 1500 * time.Millisecond, CheckEvery: 100 * time.Millisecond,
			open: netstackOpener(nets),
		})
	}()

	node := recv(t, nets, "the node's link")
	assert.Equal(t, nodeAddr.Addr(), recv(t, addrs, "the node's address"))

	// The node's maintenance API stand-in on [address]:50000.
	maint, err := node.ListenTCPAddrPort(netip.AddrPortFrom(nodeAddr.Addr(), 50000))
	require.NoError(t, err)

	t.Cleanup(func() { maint.Close() })

	go func() {
		for {
			c, err := maint.Accept()
			if err != nil {
				return
			}

			_, _ = io.WriteString(c, "maintenance here\n")
			c.Close()
		}
	}()

	exchange(t, omni.net, node)

	// Omni restarts: a new key and port, the node's peer forgotten.
	mu.Lock()
	omni.dev.Close()
	omni = newFakeOmniPeer(t)
	restarted := omni
	mu.Unlock()

	before := len(prov.requests())

	require.Eventually(t, func() bool { return len(prov.requests()) > before }, 20*time.Second, 10*time.Millisecond,
		"no Provision after the handshakes stopped")
	exchange(t, restarted.net, node)

	cancel()
	require.NoError(t, recv(t, done, "Run's return"))
}

// exchange proves traffic both ways through the tunnel: the node dials Omni's address
// and is seen from its SideroLink address; Omni dials the node's port 50000.
func exchange(t *testing.T, omni, node *netstack.Net) {
	t.Helper()

	lis, err := omni.ListenTCPAddrPort(netip.AddrPortFrom(omniAddr, 8092))
	require.NoError(t, err)

	defer lis.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// The first SYN may go before the handshake (or to a peer about to be replaced):
	// dial until one gets through, as a real sender would.
	var c net.Conn

	require.Eventually(t, func() bool {
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		defer dcancel()

		c, err = node.DialContextTCPAddrPort(dctx, netip.AddrPortFrom(omniAddr, 8092))

		return err == nil
	}, 20*time.Second, 10*time.Millisecond, "the node never reached Omni")

	defer c.Close()

	_, err = io.WriteString(c, "hello through SideroLink\n")
	require.NoError(t, err)

	in, err := lis.Accept()
	require.NoError(t, err)

	defer in.Close()

	line, err := bufio.NewReader(in).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "hello through SideroLink\n", line)

	from, err := netip.ParseAddrPort(in.RemoteAddr().String())
	require.NoError(t, err)
	assert.Equal(t, nodeAddr.Addr(), from.Addr(), "Omni tells machines apart by their SideroLink address")

	back, err := omni.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(nodeAddr.Addr(), 50000))
	require.NoError(t, err)

	defer back.Close()

	greeting, err := bufio.NewReader(back).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "maintenance here\n", greeting)
}

// bufferedLogger logs into a buffer the test prints if it fails: wireguard-go's workers
// log their last lines after Close returns, when the test's own log is closed.
func bufferedLogger(t *testing.T) *zap.Logger {
	t.Helper()

	var (
		mu  sync.Mutex
		buf strings.Builder
	)

	w := zapcore.AddSync(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()

		return buf.Write(p)
	}))

	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()

			t.Log(buf.String())
		}
	})

	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), w, zapcore.DebugLevel))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
