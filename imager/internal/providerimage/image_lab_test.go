//go:build lab

package providerimage_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/imager/internal/ociimage"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/pin/tftp/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/imager/internal/bootassets"
	"github.com/anvil-metal/anvil/imager/internal/kmod"
	"github.com/anvil-metal/anvil/imager/internal/providerimage"
	"github.com/anvil-metal/anvil/internal/initramfs"
	"github.com/anvil-metal/anvil/internal/netns"
)

// The namespaces' network: the provider's side and the machines' (the test's clients).
const (
	serverIf = "img0"
	clientIf = "img1"
)

var (
	serverAddr = netip.MustParsePrefix("10.198.0.1/24")
	clientAddr = netip.MustParsePrefix("10.198.0.2/24")
)

// TestLabProviderImage builds the provider's image from the real inputs (the provider and
// its Omni adapter built static, Debian's iPXE binaries and CA bundle, the agent's boot
// assets), reads its config back from the OCI layout, unpacks its layers as a runtime
// would (owners, modes, file capabilities) and runs its entrypoint chrooted into them,
// with the image's Env, user and working directory and no flag at all, in a network
// namespace of its own, as a container runtime would: a bounding set of the image's
// capabilities only, no_new_privs. A machine's side, in another namespace, gets the
// ProxyDHCP's offer, undionly.kpxe over TFTP, the agent's boot script and its kernel and
// initramfs over HTTP, each the image's bytes.
func TestLabProviderImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, chroot, file capabilities")
	}

	if _, err := os.Stat(filepath.Join(providerimage.DefaultIPXEDir, "undionly.kpxe")); err != nil {
		t.Skipf("needs Debian's iPXE binaries (make setup installs ipxe): %v", err)
	}

	root := repoRoot()
	work := t.TempDir()

	opts := providerimage.Options{
		Provider:    goBuild(t, root, filepath.Join(work, "anvil-provider"), "./provider/cmd/provider"),
		OmniAdapter: goBuild(t, root, filepath.Join(work, "omni-adapter"), "./provider/cmd/omni-adapter"),
		AgentAssets: agentAssets(t, root, work),
		IPXEDir:     providerimage.DefaultIPXEDir,
		IPXEFiles:   providerimage.DefaultIPXEFiles,
		CABundle:    providerimage.DefaultCABundle,
		Arch:        "amd64",
		Version:     "lab",
		Created:     time.Unix(created, 0),
	}

	built, err := providerimage.Build(t.Context(), opts)
	require.NoError(t, err)

	dir := filepath.Join(work, "image")
	require.NoError(t, ociimage.WriteLayout(t.Context(), dir, built, opts.Version))

	// From here on, the image as the layout holds it.
	idx, err := layout.ImageIndexFromPath(dir)
	require.NoError(t, err)

	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 1)

	img, err := idx.Image(m.Manifests[0].Digest)
	require.NoError(t, err)

	cfgFile, err := img.ConfigFile()
	require.NoError(t, err)

	cfg := cfgFile.Config
	require.Equal(t, []string{providerimage.ProviderPath}, cfg.Entrypoint)
	require.Equal(t, "10000:10000", cfg.User)
	assert.Contains(t, cfg.ExposedPorts, "69/udp")
	assert.Contains(t, cfg.ExposedPorts, "67/udp")
	assert.Equal(t, "anvil-provider", cfg.Labels["org.opencontainers.image.title"])
	assert.Equal(t, "lab", cfg.Labels["org.opencontainers.image.version"])

	rootfs := filepath.Join(work, "rootfs")
	unpack(t, mutate.Extract(img), rootfs)

	inImage := func(p string) []byte {
		b, err := os.ReadFile(filepath.Join(rootfs, p))
		require.NoError(t, err)

		return b
	}

	if getcap, err := exec.LookPath("getcap"); err == nil {
		out, err := exec.Command(getcap, filepath.Join(rootfs, providerimage.ProviderPath)).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "cap_net_bind_service,cap_net_raw=ep", "libcap reads the image's capabilities as setcap would write them")
	}

	uid, gid := parseUser(t, cfg.User)

	t.Run("every ANVIL_ variable of the image is a provider flag's", func(t *testing.T) {
		help := exec.Command(cfg.Entrypoint[0], "--help")
		help.Env, help.Dir = cfg.Env, cfg.WorkingDir
		help.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: uid, Gid: gid}}

		out, err := help.CombinedOutput()
		require.NoError(t, err, "%s", out)

		for _, env := range cfg.Env {
			if k, _, _ := strings.Cut(env, "="); strings.HasPrefix(k, "ANVIL_") {
				assert.Contains(t, string(out), "[$"+k+"]", "the provider reads no %s", k)
			}
		}
	})

	server, client := newNet(t)
	log := &syncBuffer{}

	cmd := exec.Command(cfg.Entrypoint[0], cfg.Cmd...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = cfg.Env, cfg.WorkingDir, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	require.NoError(t, startContained(server, cmd, []int{unix.CAP_NET_BIND_SERVICE, unix.CAP_NET_RAW}))

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	t.Cleanup(func() {
		_ = cmd.Process.Kill() // fails only if it is gone already

		if err := <-exited; t.Failed() {
			t.Logf("provider log (%v):\n%s", err, log.String())
		}
	})

	httpc := clientIn(client)
	base := "http://" + net.JoinHostPort(serverAddr.Addr().String(), "50042")

	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("the provider exited: %v", err)
		default:
		}

		resp, err := httpc.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()

			if resp.StatusCode == http.StatusOK {
				break
			}
		}

		require.True(t, time.Now().Before(deadline), "the provider did not come up: %v", err)
	}

	t.Run("runs as the image's user with its capabilities", func(t *testing.T) {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		require.NoError(t, err)

		fields := map[string]string{}
		for line := range strings.SplitSeq(string(status), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.Join(strings.Fields(v), " ")
			}
		}

		assert.Equal(t, "10000 10000 10000 10000", fields["Uid"])
		assert.Equal(t, "10000 10000 10000 10000", fields["Gid"])
		assert.Equal(t, "1", fields["NoNewPrivs"])

		// CAP_NET_BIND_SERVICE (10) and CAP_NET_RAW (13): from the file, nothing else.
		assert.Equal(t, "0000000000002400", fields["CapEff"])
		assert.Equal(t, "0000000000002400", fields["CapPrm"])
		assert.Equal(t, "0000000000000000", fields["CapAmb"])
	})

	t.Run("ProxyDHCP on port 67 offers undionly.kpxe", func(t *testing.T) {
		offer := proxyOffer(t, client)
		assert.Equal(t, dhcpv4.MessageTypeOffer, offer.MessageType())
		assert.Equal(t, "undionly.kpxe", offer.BootFileName)
		assert.True(t, offer.ServerIPAddr.Equal(serverAddr.Addr().AsSlice()), "next server %s", offer.ServerIPAddr)
	})

	t.Run("TFTP on port 69 serves the image's iPXE", func(t *testing.T) {
		for _, f := range []string{"undionly.kpxe", "ipxe.efi"} {
			assert.Equal(t, inImage(filepath.Join(providerimage.IPXEDir, f)), tftpGet(t, client, f), f)
		}
	})

	t.Run("the agent's boot script and assets are the image's", func(t *testing.T) {
		status, script := get(t, httpc, base+"/ipxe/boot.ipxe?uuid=4c4c4544-0000-1000-8000-00000000001d&mac=52-54-00-00-00-1d&arch=x86_64&platform=pcbios")
		require.Equal(t, http.StatusOK, status, "%s", script)
		require.True(t, strings.HasPrefix(string(script), "#!ipxe\n"), "%s", script)

		urls := map[string]string{}
		for line := range strings.SplitSeq(string(script), "\n") {
			if verb, rest, ok := strings.Cut(line, " "); ok && (verb == "kernel" || verb == "initrd") {
				urls[verb] = strings.Fields(rest)[0]
			}
		}

		for verb, file := range map[string]string{"kernel": "vmlinuz-amd64", "initrd": "initramfs-amd64.zst"} {
			require.Equal(t, base+"/assets/agent/"+file, urls[verb], "%s", script)

			status, body := get(t, httpc, urls[verb])
			require.Equal(t, http.StatusOK, status)
			assert.True(t, bytes.Equal(inImage(filepath.Join(providerimage.AgentDir, file)), body), "%s is not the image's", file)
		}
	})
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)

	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// goBuild builds pkg static, as make image does.
func goBuild(t *testing.T, root, out, pkg string) string {
	t.Helper()

	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building %s: %s", pkg, b)

	return out
}

// agentAssets is _out/agent when make agent-initramfs has built it, else assets built
// here from Debian's kernel (quicker: zstd level 3).
func agentAssets(t *testing.T, root, work string) string {
	t.Helper()

	made := filepath.Join(root, "_out", "agent")
	if _, err := os.Stat(filepath.Join(made, "vmlinuz-amd64")); err == nil {
		if _, err := os.Stat(filepath.Join(made, "initramfs-amd64.zst")); err == nil {
			return made
		}
	}

	kernel, err := bootassets.FindKernel("/", "", "")
	if err != nil {
		t.Skipf("no _out/agent, and no Debian kernel to build it from (make setup installs linux-image-amd64): %v", err)
	}

	out := filepath.Join(work, "agent")
	_, err = bootassets.Build(t.Context(), bootassets.Options{
		Agent: goBuild(t, root, filepath.Join(work, "metal-agent"), "./agent/cmd/metal-agent"), Kernel: kernel,
		Modules: kmod.DefaultPatterns, OutDir: out, Arch: "amd64", Compression: initramfs.Zstd, ZstdLevel: 3,
		Cmdline: bootassets.DefaultCmdline,
	})
	require.NoError(t, err)

	return out
}

// unpack writes the image's filesystem to dir as a runtime does: owners, modes (set
// bits included) and extended attributes, the file capabilities last, since a chown or
// a write clears them.
func unpack(t *testing.T, rc io.ReadCloser, dir string) {
	t.Helper()

	defer rc.Close()

	tr := tar.NewReader(rc)

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}

		require.NoError(t, err)
		require.True(t, filepath.IsLocal(h.Name), h.Name)

		p := filepath.Join(dir, h.Name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))

		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(p, 0o755))
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			require.NoError(t, err)

			_, err = io.Copy(f, tr)
			require.NoError(t, errors.Join(err, f.Close()))
		default:
			t.Fatalf("%s: the image holds a %c entry, which it has no reason to", h.Name, h.Typeflag)
		}

		require.NoError(t, os.Lchown(p, h.Uid, h.Gid))
		require.NoError(t, os.Chmod(p, h.FileInfo().Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)))

		for k, v := range h.PAXRecords {
			if attr, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				require.NoError(t, unix.Setxattr(p, attr, []byte(v), 0), "%s: %s", p, attr)
			}
		}
	}

	// The unpacked root is the container's "/": t.TempDir made it 0700.
	require.NoError(t, os.Chmod(dir, 0o755))
}

func parseUser(t *testing.T, user string) (uint32, uint32) {
	t.Helper()

	u, g, ok := strings.Cut(user, ":")
	require.True(t, ok, "user %q is not uid:gid", user)

	uid, err := strconv.ParseUint(u, 10, 32)
	require.NoError(t, err)

	gid, err := strconv.ParseUint(g, 10, 32)
	require.NoError(t, err)

	return uint32(uid), uint32(gid)
}

// newNet makes two namespaces joined by a veth pair, the provider's and the machines',
// and removes them when the test ends, pass or fail.
func newNet(t *testing.T) (server, client string) {
	t.Helper()

	var id [4]byte
	_, _ = rand.Read(id[:]) // never fails

	server, client = "anvil-img-"+hex.EncodeToString(id[:])+"-s", "anvil-img-"+hex.EncodeToString(id[:])+"-c"

	for _, ns := range []string{server, client} {
		require.NoError(t, netns.Create(ns))
		t.Cleanup(func() {
			pids, err := netns.PIDs(ns)
			assert.NoError(t, err)
			assert.Empty(t, pids, "processes left in %s", ns)
			assert.NoError(t, netns.Delete(ns))
			assert.False(t, netns.Exists(ns), "namespace %s is left behind", ns)
		})
	}

	s, err := netns.OpenLinks(server)
	require.NoError(t, err)

	defer s.Close()

	require.NoError(t, s.AddVeth(serverIf, clientIf, client))

	c, err := netns.OpenLinks(client)
	require.NoError(t, err)

	defer c.Close()

	for _, side := range []struct {
		links *netns.Links
		dev   string
		addr  netip.Prefix
	}{{s, serverIf, serverAddr}, {c, clientIf, clientAddr}} {
		require.NoError(t, side.links.AddAddr(side.dev, side.addr))
		require.NoError(t, side.links.SetUp(side.dev))
		require.NoError(t, side.links.SetUp("lo"))
	}

	return server, client
}

// startContained starts cmd in namespace ns as a container runtime would start the
// image's entrypoint: a bounding set of keep only, no_new_privs, and the capabilities it
// holds kept across the change of user (runc's PR_SET_KEEPCAPS), so that only the file's
// capabilities can make it the ones it runs with. cmd is forked from a thread of its own
// which has all that and is never unlocked, so Go ends it, or, were it the main thread,
// parks it for good; it goes back to its own namespace first, which the process's
// namespace is when it is the main thread.
func startContained(ns string, cmd *exec.Cmd, keep []int) error {
	errc := make(chan error, 1)

	go func() {
		runtime.LockOSThread()

		errc <- func() error {
			own, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				return err
			}

			defer own.Close()

			f, err := os.Open(netns.Path(ns))
			if err != nil {
				return err
			}

			defer f.Close()

			if err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("error entering %s: %w", ns, err)
			}

			defer func() {
				if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
					panic(fmt.Sprintf("error leaving %s: %v", ns, err)) // the process would stay in it
				}
			}()

			b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
			if err != nil {
				return err
			}

			last, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return err
			}

			for c := range last + 1 {
				if slices.Contains(keep, c) {
					continue
				}

				if err = unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
					return fmt.Errorf("error dropping capability %d from the bounding set: %w", c, err)
				}
			}

			for _, opt := range []int{unix.PR_SET_KEEPCAPS, unix.PR_SET_NO_NEW_PRIVS} {
				if err = unix.Prctl(opt, 1, 0, 0, 0); err != nil {
					return fmt.Errorf("error setting prctl %d: %w", opt, err)
				}
			}

			return cmd.Start()
		}()
	}()

	return <-errc
}

// clientIn is an HTTP client whose connections are dialled in namespace ns.
func clientIn(ns string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}

	return &http.Client{
		Timeout: time.Minute,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var conn net.Conn

				err := netns.Do(ns, func() error {
					var err error

					conn, err = d.DialContext(ctx, network, addr)

					return err
				})

				return conn, err
			},
		},
	}
}

func get(t *testing.T, c *http.Client, url string) (int, []byte) {
	t.Helper()

	resp, err := c.Get(url)
	require.NoError(t, err)

	defer resp.Body.Close()

	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	return resp.StatusCode, body
}

// tftpGet reads file from the provider's TFTP server, from the machines' namespace.
func tftpGet(t *testing.T, ns, file string) []byte {
	t.Helper()

	var buf bytes.Buffer

	require.NoError(t, netns.Do(ns, func() error {
		c, err := tftp.NewClient(net.JoinHostPort(serverAddr.Addr().String(), "69"))
		if err != nil {
			return err
		}

		c.SetTimeout(2 * time.Second)
		c.SetRetries(5)

		wt, err := c.Receive(file, "octet")
		if err != nil {
			return fmt.Errorf("error reading %s over TFTP: %w", file, err)
		}

		_, err = wt.WriteTo(&buf)

		return err
	}))

	return buf.Bytes()
}

// proxyOffer broadcasts a BIOS PXE client's discover from the machines' namespace and
// returns the ProxyDHCP's offer.
func proxyOffer(t *testing.T, ns string) *dhcpv4.DHCPv4 {
	t.Helper()

	var conn net.PacketConn

	require.NoError(t, netns.Do(ns, func() error {
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error

			err := rc.Control(func(fd uintptr) {
				serr = errors.Join(
					unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1),
					unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1),
					unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, clientIf),
				)
			})

			return errors.Join(err, serr)
		}}

		var err error

		conn, err = lc.ListenPacket(context.Background(), "udp4", "0.0.0.0:68")

		return err
	}))

	defer conn.Close()

	req, err := dhcpv4.New(
		dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
		dhcpv4.WithHwAddr(net.HardwareAddr{0x52, 0x54, 0x00, 0x00, 0x00, 0x1d}),
		dhcpv4.WithBroadcast(true),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)),
	)
	require.NoError(t, err)

	bcast := &net.UDPAddr{IP: net.IPv4bcast, Port: 67}
	buf := make([]byte, 1500)

	for range 10 {
		_, err := conn.WriteTo(req.ToBytes(), bcast)
		require.NoError(t, err)

		_ = conn.SetReadDeadline(time.Now().Add(time.Second)) // fails only on a closed conn

		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				break // the deadline: send again
			}

			resp, err := dhcpv4.FromBytes(buf[:n])
			if err == nil && resp.TransactionID == req.TransactionID && resp.OpCode == dhcpv4.OpcodeBootReply {
				return resp
			}
		}
	}

	t.Fatal("no offer from the ProxyDHCP")

	return nil
}

// syncBuffer is the provider's log, written by its output's copiers and read at the end.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.String()
}
