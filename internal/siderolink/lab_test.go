//go:build lab

package siderolink

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	pb "github.com/siderolabs/siderolink/api/siderolink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"google.golang.org/grpc"

	"github.com/anvil-metal/anvil/internal/netns"
)

// The child process (the node) reads its part from these.
const (
	labChildEnv     = "ANVIL_SIDEROLINK_LAB_CHILD"
	labAPIEnv       = "ANVIL_SIDEROLINK_LAB_API"
	labUserspaceEnv = "ANVIL_SIDEROLINK_LAB_USERSPACE"
	labLogPort      = 8092
	labOmniTUN      = "slomni"
)

// TestLabSideroLinkTUN joins a node to a stand-in Omni across two network namespaces,
// each with a real link: Omni is wireguard-go over a TUN device (as Omni runs it), the
// node is this package in a process of its own in the other namespace. The node provisions
// over the veth between them, brings its link up — a TUN device under wireguard-go, or
// kernel WireGuard where the kernel has it — and the two talk through the tunnel both ways.
func TestLabSideroLinkTUN(t *testing.T) {
	if os.Getenv(labChildEnv) != "" {
		labNode(t)

		return
	}

	if os.Geteuid() != 0 {
		t.Skip("network namespaces and TUN devices need root")
	}

	for _, bin := range []string{"ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s (iproute2)", bin)
		}
	}

	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TUN devices: %v", err)
	}

	_, kernelWG := os.Stat("/sys/module/wireguard")

	for _, tc := range []struct {
		name      string
		userspace bool
		wantKind  string
	}{
		// The userspace path, always: wireguard-go over a TUN device.
		{name: "userspace", userspace: true, wantKind: "tun"},
		// The agent's own choice: kernel WireGuard where the module is loaded, else the
		// same fallback.
		{name: "auto", wantKind: map[bool]string{true: "wireguard", false: "tun"}[kernelWG == nil]},
	} {
		t.Run(tc.name, func(t *testing.T) { labJoin(t, tc.userspace, tc.wantKind) })
	}
}

func labJoin(t *testing.T, userspace bool, wantKind string) {
	tag := fmt.Sprintf("anvsl%d-%t", os.Getpid()%100000, userspace)
	omniNS, nodeNS := tag+"-omni", tag+"-node"

	for _, ns := range []string{omniNS, nodeNS} {
		require.NoError(t, netns.Create(ns))
		t.Cleanup(func() { assert.NoError(t, netns.Delete(ns)) })
	}

	omniLinks, err := netns.OpenLinks(omniNS)
	require.NoError(t, err)

	t.Cleanup(func() { omniLinks.Close() })

	nodeLinks, err := netns.OpenLinks(nodeNS)
	require.NoError(t, err)

	t.Cleanup(func() { nodeLinks.Close() })

	require.NoError(t, omniLinks.AddVeth("sl-omni", "sl-node", nodeNS))
	require.NoError(t, omniLinks.AddAddr("sl-omni", netip.MustParsePrefix("10.251.0.1/24")))
	require.NoError(t, omniLinks.SetUp("sl-omni"))
	require.NoError(t, nodeLinks.AddAddr("sl-node", netip.MustParsePrefix("10.251.0.2/24")))
	require.NoError(t, nodeLinks.SetUp("sl-node"))

	// Omni: wireguard-go over a TUN device in its namespace. Whatever opens a socket or
	// the device runs inside netns.Do; what runs later uses those.
	key, err := wgtypes.GeneratePrivateKey()
	require.NoError(t, err)

	var (
		dev             *device.Device
		provLis, logLis net.Listener
		omniLogger      = zap.NewNop()
		nodeAddress     = netip.MustParsePrefix("fdae:41e4:649b:9303:0:0:a:1/64")
	)

	require.NoError(t, netns.Do(omniNS, func() error {
		tdev, err := tun.CreateTUN(labOmniTUN, MTU)
		if err != nil {
			return err
		}

		dev = device.NewDevice(tdev, conn.NewDefaultBind(), deviceLogger(omniLogger))
		if err := dev.IpcSet(fmt.Sprintf("private_key=%x\nlisten_port=51820\n", key[:])); err != nil {
			return err
		}

		if err := dev.Up(); err != nil {
			return err
		}

		provLis, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", "10.251.0.1:0")

		return err
	}))

	t.Cleanup(dev.Close)

	require.NoError(t, omniLinks.AddAddr(labOmniTUN, netip.PrefixFrom(omniAddr, 64)))
	require.NoError(t, omniLinks.SetUp(labOmniTUN))

	require.NoError(t, netns.Do(omniNS, func() error {
		var err error

		logLis, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", netip.AddrPortFrom(omniAddr, labLogPort).String())

		return err
	}))

	t.Cleanup(func() { logLis.Close() })

	srv := grpc.NewServer()
	pb.RegisterProvisionServiceServer(srv, &fakeProvision{answer: func(_ int, req *pb.ProvisionRequest) (*pb.ProvisionResponse, error) {
		nodeKey, err := wgtypes.ParseKey(req.GetNodePublicKey())
		if err != nil {
			return nil, err
		}

		if err := dev.IpcSet(fmt.Sprintf("public_key=%x\nreplace_allowed_ips=true\nallowed_ip=%s/128\n", nodeKey[:], nodeAddress.Addr())); err != nil {
			return nil, err
		}

		return response(key, nodeAddress.String(), "10.251.0.1:51820"), nil
	}})

	served := make(chan struct{})

	go func() {
		defer close(served)

		_ = srv.Serve(provLis)
	}()

	t.Cleanup(func() {
		srv.Stop()
		<-served
	})

	// The node: this test, again, in a process inside the node's namespace.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cmd := netns.Command(ctx, nodeNS, os.Args[0], "-test.run=^TestLabSideroLinkTUN$", "-test.count=1")
	cmd.Env = append(os.Environ(), labChildEnv+"=1", labAPIEnv+"="+provLis.Addr().String(), labUserspaceEnv+"="+strconv.FormatBool(userspace))

	var stderr strings.Builder
	cmd.Stderr = &stderr

	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)

	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)

	require.NoError(t, cmd.Start())

	reports := make(chan string, 16)

	go func() {
		defer close(reports)

		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "LAB "); ok {
				reports <- line
			}
		}
	}()

	next := func(what string) string {
		t.Helper()

		select {
		case line, ok := <-reports:
			require.True(t, ok, "the node ended before %s:\n%s", what, stderr.String())
			require.True(t, strings.HasPrefix(line, what+" "), "want %s, got %q", what, line)

			return strings.TrimPrefix(line, what+" ")
		case <-ctx.Done():
			t.Fatalf("no %s from the node:\n%s", what, stderr.String())

			return ""
		}
	}

	assert.Equal(t, nodeAddress.Addr().String(), next("ADDR"))
	assert.Equal(t, wantKind, next("KIND"))
	assert.Equal(t, strconv.Itoa(MTU), next("MTU"))

	// The node reaches Omni's address from its SideroLink address, through the tunnel.
	in, err := logLis.Accept()
	require.NoError(t, err)

	line, err := bufio.NewReader(in).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "hello from "+nodeAddress.Addr().String()+"\n", line)
	assert.Equal(t, nodeAddress.Addr().String(), netip.MustParseAddrPort(in.RemoteAddr().String()).Addr().String())
	in.Close()

	// Omni reaches the node's port 50000, as it reaches the maintenance API.
	var back net.Conn

	require.NoError(t, netns.Do(omniNS, func() error {
		var err error

		back, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", netip.AddrPortFrom(nodeAddress.Addr(), 50000).String())

		return err
	}))

	greeting, err := bufio.NewReader(back).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "maintenance here\n", greeting)
	back.Close()

	// The end: the node removes its link.
	stdin.Close()
	assert.Equal(t, "true", next("GONE"))
	require.NoError(t, cmd.Wait(), stderr.String())
	t.Log("the node's log:\n" + stderr.String())

	if !userspace && wantKind == "tun" {
		assert.Contains(t, stderr.String(), "no kernel WireGuard; SideroLink over wireguard-go", "the fallback, said")
	}
}

// labNode is the node's side, in the node's namespace: Run, then report what the link
// is and use it.
func labNode(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// The parent closes stdin to end the node.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)

		cancel()
	}()

	logger, err := zap.NewDevelopment()
	require.NoError(t, err)

	addrs := make(chan netip.Addr, 4)
	done := make(chan error, 1)

	go func() {
		done <- Run(ctx, Options{
			API: os.Getenv(labAPIEnv), Insecure: true, JoinToken: "v2:lab", UUID: "4c4c4544-0000-1000-8000-00000000lab1",
			UniqueToken: `{"Fingerprint":"lab","Token":"lab"}`, TalosVersion: "v1.13.9", Userspace: os.Getenv(labUserspaceEnv) == "true",
			OnAddress: func(a netip.Addr) { addrs <- a }, Logger: logger,
		})
	}()

	var addr netip.Addr

	select {
	case addr = <-addrs:
	case <-time.After(time.Minute):
		t.Fatal("no SideroLink address")
	}

	// The maintenance API stand-in on [address]:50000, bound as the agent binds it.
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", netip.AddrPortFrom(addr, 50000).String())
	require.NoError(t, err)

	defer lis.Close()

	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}

			_, _ = io.WriteString(c, "maintenance here\n")
			c.Close()
		}
	}()

	fmt.Println("LAB ADDR", addr)
	fmt.Println("LAB KIND", linkKind(t, DefaultLinkName))

	ifc, err := net.InterfaceByName(DefaultLinkName)
	require.NoError(t, err)
	fmt.Println("LAB MTU", ifc.MTU)

	// The first SYN may beat the handshake: dial until one gets through.
	var c net.Conn

	require.Eventually(t, func() bool {
		c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", netip.AddrPortFrom(omniAddr, labLogPort).String())

		return err == nil
	}, time.Minute, 100*time.Millisecond, "Omni unreachable through the tunnel")

	_, err = fmt.Fprintf(c, "hello from %s\n", addr)
	require.NoError(t, err)
	c.Close()

	<-ctx.Done()
	require.NoError(t, <-done)

	_, err = net.InterfaceByName(DefaultLinkName)
	fmt.Println("LAB GONE", err != nil)
}

// linkKind is the link's kind as rtnetlink has it: "tun" or "wireguard".
func linkKind(t *testing.T, name string) string {
	conn, err := rtnetlink.Dial(nil)
	require.NoError(t, err)

	defer conn.Close()

	links, err := conn.Link.List()
	require.NoError(t, err)

	for _, l := range links {
		if l.Attributes != nil && l.Attributes.Name == name && l.Attributes.Info != nil {
			return l.Attributes.Info.Kind
		}
	}

	return "unknown"
}
