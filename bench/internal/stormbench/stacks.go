package stormbench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// httpPort is the port both stacks serve HTTP on, so the machines see the same URLs.
const httpPort = 8080

// stack is a set of processes serving the storm in the server namespace.
type stack struct {
	name  string
	procs []*proc.Child
	logs  []string
}

func (s *stack) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].Stop(5 * time.Second)
	}
}

// exited names a process of the stack that is gone.
func (s *stack) exited() error {
	for i, p := range s.procs {
		if gone, err := p.Exited(); gone {
			return fmt.Errorf("%s exited: %v (log: %s)", p.Name(), err, s.logs[i])
		}
	}

	return nil
}

func (s *stack) start(name string, argv []string, log string) error {
	p, err := proc.Start(name, exec.Command(argv[0], argv[1:]...), log)
	if err != nil {
		return err
	}

	s.procs = append(s.procs, p)
	s.logs = append(s.logs, log)

	return nil
}

// startSiteDHCP starts the site's DHCP server: dnsmasq in the site namespace, no PXE,
// every machine's address reserved by its MAC (as sites do for servers). Without the
// reservations dnsmasq offers one free address to many machines of a storm at once,
// and most of the storm goes to NAKs and new DISCOVERs: the site server's limit, not
// the PXE stack's.
func startSiteDHCP(cfg *Config, g *segment) (*stack, error) {
	b := g.prefix.Addr().As4()
	from := g.leases.Addr().Next()
	to := netip.AddrFrom4([4]byte{b[0], b[1], 255, 250})

	hosts := filepath.Join(cfg.WorkDir, "site.hosts")
	if err := os.WriteFile(hosts, siteReservations(g, cfg.Machines), 0o644); err != nil {
		return nil, fmt.Errorf("error writing the site's reservations: %w", err)
	}

	s := &stack{name: "site dhcp"}
	log := filepath.Join(cfg.WorkDir, "site-dnsmasq.log")
	err := s.start("site dnsmasq", netns.Argv(g.site, proc.Pinned(-1, "dnsmasq",
		"--no-daemon", "--conf-file=/dev/null", "--port=0", "--pid-file=",
		"--interface="+g.siteIf, "--bind-interfaces",
		fmt.Sprintf("--dhcp-range=%s,%s,255.255.0.0,1h", from, to),
		"--dhcp-lease-max=1000000", "--dhcp-hostsfile="+hosts,
		// No lease file: dnsmasq rewrites all of it at every lease, which is what a
		// storm would then measure.
		"--leasefile-ro",
		"--dhcp-authoritative", "--no-ping",
		"--log-facility=-", "--quiet-dhcp",
	)...), log)
	if err != nil {
		return nil, err
	}

	time.Sleep(300 * time.Millisecond) // dnsmasq binds at once; a machine's retry covers a slow start

	if err := s.exited(); err != nil {
		s.stop()

		return nil, err
	}

	if err := growReceiveBuffer(s.procs[0].Pid(), serverPort, siteReceiveBuffer); err != nil {
		s.stop()

		return nil, fmt.Errorf("site dnsmasq: %w", err)
	}

	return s, nil
}

// siteReceiveBuffer is the site DHCP server's socket receive buffer, as Anvil's ProxyDHCP
// has it: the storm's burst queues instead of being dropped by the fixture.
const siteReceiveBuffer = 4 << 20

// siteReservations is dnsmasq's hosts file: machine i gets the i-th address of the
// segment's lease range.
func siteReservations(g *segment, machines int) []byte {
	var b strings.Builder

	addr := g.leases.Addr()

	for i := range machines {
		addr = addr.Next()
		fmt.Fprintf(&b, "%s,%s\n", newMachine(i, 0).MAC, addr)
	}

	return []byte(b.String())
}

// startAnvil starts the provider on a fresh state in the server namespace: ProxyDHCP on
// the segment, TFTP from the storm's root, the agent's assets.
func startAnvil(ctx context.Context, cfg *Config, g *segment) (*stack, error) {
	state := filepath.Join(cfg.WorkDir, "anvil-state")
	if err := os.RemoveAll(state); err != nil {
		return nil, fmt.Errorf("error clearing %s: %w", state, err)
	}

	s := &stack{name: "anvil"}
	log := filepath.Join(cfg.WorkDir, "anvil.log")

	err := s.start("anvil", netns.Argv(g.server, proc.Pinned(cfg.ServerCPU, cfg.ProviderBin,
		"--state-dir", state,
		"--api-advertise-address", g.serverAddr.String(),
		"--api-listen-address", g.serverAddr.String(),
		"--api-port", strconv.Itoa(httpPort),
		"--dhcp-proxy-iface-or-ip", g.serverIf,
		"--tftp-root", cfg.tftpRoot(),
		"--tftp-listen-address", g.serverAddr.String()+":69",
		// The simulated machines share one address: as dnsmasq's --tftp-max below.
		"--tftp-max-per-client", strconv.Itoa(max(cfg.Machines, 50)),
		"--agent-assets-dir", cfg.assetsDir(),
		"--ui-listen-address", "",
		"--image-cache-size", "0",
		// Nothing in a storm of unknown machines needs the factory: never reached.
		"--image-factory-base-url", "http://127.0.0.1:9",
		"--image-factory-pxe-base-url", "http://127.0.0.1:9",
	)...), log)
	if err != nil {
		return nil, err
	}

	if err := waitHTTP(ctx, s, g, "/healthz", 60*time.Second); err != nil {
		s.stop()

		return nil, err
	}

	return s, nil
}

// startClassic starts the classic stack in the server namespace: dnsmasq as ProxyDHCP
// and TFTP server, nginx serving the same script shape and the same asset files.
func startClassic(ctx context.Context, cfg *Config, g *segment) (*stack, error) {
	www, err := classicWWW(cfg, g)
	if err != nil {
		return nil, err
	}

	s := &stack{name: "classic"}
	base := fmt.Sprintf("http://%s:%d", g.serverAddr, httpPort)

	err = s.start("dnsmasq proxy", netns.Argv(g.server, proc.Pinned(cfg.ServerCPU, "dnsmasq",
		"--no-daemon", "--conf-file=/dev/null", "--port=0", "--pid-file=",
		"--interface="+g.serverIf, "--bind-interfaces",
		"--dhcp-range="+g.prefix.Addr().String()+",proxy,255.255.0.0",
		"--dhcp-userclass=set:ipxe,iPXE",
		// PXE firmware gets the iPXE binary, iPXE the script (as Anvil does).
		"--pxe-service=tag:!ipxe,x86PC,Anvil classic,"+strings.TrimSuffix(cfg.biosFile(), ".0"),
		"--pxe-service=tag:ipxe,x86PC,Anvil classic,"+base+"/ipxe/start.ipxe",
		// dnsmasq serves 50 TFTP transfers at once by default and ignores the rest: a
		// storm's peer is tuned for the storm.
		"--enable-tftp", "--tftp-root="+cfg.tftpRoot(), "--tftp-no-fail", "--tftp-max="+strconv.Itoa(max(cfg.Machines, 50)),
		"--log-facility=-", "--quiet-dhcp", "--quiet-tftp",
	)...), filepath.Join(cfg.WorkDir, "classic-dnsmasq.log"))
	if err != nil {
		return nil, err
	}

	conf := filepath.Join(www, "..", "nginx.conf")
	if err = os.WriteFile(conf, fmt.Appendf(nil, nginxConf, filepath.Dir(www), g.serverAddr, httpPort), 0o644); err != nil {
		s.stop()

		return nil, fmt.Errorf("error writing the nginx configuration: %w", err)
	}

	err = s.start("nginx", netns.Argv(g.server, proc.Pinned(cfg.ServerCPU, "nginx",
		"-p", filepath.Dir(www), "-c", conf, "-e", filepath.Join(filepath.Dir(www), "error.log"))...),
		filepath.Join(cfg.WorkDir, "classic-nginx.log"))
	if err != nil {
		s.stop()

		return nil, err
	}

	if err := waitHTTP(ctx, s, g, "/ipxe/start.ipxe", 20*time.Second); err != nil {
		s.stop()

		return nil, err
	}

	return s, nil
}

// NginxConf is nginx as a PXE site runs it for boot files: one worker (the provider is
// pinned to one CPU too), sendfile, no access log. Arguments: prefix, address, port.
const nginxConf = `daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  client_body_temp_path %[1]s/tmp;
  proxy_temp_path %[1]s/tmp;
  fastcgi_temp_path %[1]s/tmp;
  uwsgi_temp_path %[1]s/tmp;
  scgi_temp_path %[1]s/tmp;
  keepalive_requests 100000;
  default_type application/octet-stream;
  server {
    listen %[2]s:%[3]d backlog=4096;
    root %[1]s/www;
    location /ipxe/ { default_type "text/plain; charset=utf-8"; add_header Cache-Control no-store; }
  }
}
`

// classicWWW lays out nginx's tree: the start script (the provider's own text), an
// agent script of the provider's shape, and links to the same asset files.
func classicWWW(cfg *Config, g *segment) (string, error) {
	dir, err := filepath.Abs(filepath.Join(cfg.WorkDir, "nginx"))
	if err != nil {
		return "", fmt.Errorf("error resolving the nginx directory: %w", err)
	}

	www := filepath.Join(dir, "www")
	if err := os.RemoveAll(www); err != nil {
		return "", fmt.Errorf("error clearing %s: %w", www, err)
	}

	for _, d := range []string{filepath.Join(www, "ipxe"), filepath.Join(www, "assets"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("error creating %s: %w", d, err)
		}
	}

	assets, err := filepath.Abs(cfg.assetsDir())
	if err != nil {
		return "", fmt.Errorf("error resolving the assets directory: %w", err)
	}

	if err := os.Symlink(assets, filepath.Join(www, "assets", "agent")); err != nil {
		return "", fmt.Errorf("error linking the assets: %w", err)
	}

	base := fmt.Sprintf("http://%s:%d", g.serverAddr, httpPort)
	start := "#!ipxe\nchain " + base + "/ipxe/boot.ipxe?uuid=${uuid}&mac=${netX/mac:hexhyp}&arch=${buildarch}&platform=${platform} || exit 1\nexit 1\n"

	cmdline, err := os.ReadFile(filepath.Join(cfg.assetsDir(), "cmdline-amd64"))
	if err != nil {
		return "", fmt.Errorf("error reading the agent cmdline: %w", err)
	}

	// The provider's agent script carries its endpoint, CA fingerprint, machine and a
	// signed token: the same length here, made up.
	boot := "#!ipxe\nimgfree\nkernel " + base + "/assets/agent/vmlinuz-amd64 initrd=" + cfg.initramfsName() + " " +
		strings.Join(strings.Fields(string(cmdline)), " ") +
		" anvil.provider=" + g.serverAddr.String() + ":8080 anvil.ca=" + strings.Repeat("c", 64) +
		" anvil.machine=a5a5f00d-5e00-4000-8000-000000000000 anvil.token=" + strings.Repeat("t", 180) + "\n" +
		"initrd " + base + "/assets/agent/" + cfg.initramfsName() + "\nboot\n"

	for name, body := range map[string]string{"start.ipxe": start, "boot.ipxe": boot} {
		if err := os.WriteFile(filepath.Join(www, "ipxe", name), []byte(body), 0o644); err != nil {
			return "", fmt.Errorf("error writing %s: %w", name, err)
		}
	}

	return www, nil
}

// waitHTTP waits until the stack answers path with 200 on the server's HTTP port,
// asked from the client namespace.
func waitHTTP(ctx context.Context, s *stack, g *segment, path string, timeout time.Duration) error {
	addr := net.JoinHostPort(g.serverAddr.String(), strconv.Itoa(httpPort))
	deadline := time.Now().Add(timeout)

	for {
		var status string

		// Dialled on a thread in the client namespace; the request is one write and one
		// read on that connection, so no goroutine of the HTTP client dials elsewhere.
		err := netns.Do(g.client, func() error {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return err
			}

			defer conn.Close()

			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))

			if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr); err != nil {
				return err
			}

			status, err = bufio.NewReader(conn).ReadString('\n')

			return err
		})
		if err == nil && strings.Contains(status, " 200 ") {
			return nil
		}

		if perr := s.exited(); perr != nil {
			return perr
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer %s on %s within %s (last: %v %q; logs: %v)", s.name, path, addr, timeout, err, status, s.logs)
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
